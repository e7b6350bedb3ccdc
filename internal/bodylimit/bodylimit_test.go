package bodylimit

import (
	"errors"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestBudgetKeepsAReserveForSmallBodies(t *testing.T) {
	b := NewBudget(800 << 10)
	big := b.Ticket()
	if !big.Take(700<<10) || big.Take(100<<10) {
		t.Fatalf("large reservations may take 7/8 of the budget and no more (in use %d)", b.InUse())
	}
	small := b.Ticket()
	if !small.Take(SmallBody) {
		t.Fatal("a small body did not fit in the reserve")
	}
	big.Release()
	small.Release()
	if b.InUse() != 0 {
		t.Fatalf("in use after release = %d", b.InUse())
	}
}

func TestReadDeclaredLengthChargedBeforeReading(t *testing.T) {
	b := NewBudget(100)
	r := httptest.NewRequest("POST", "/", errReader{}) // reading it would fail the test
	r.ContentLength = 101
	if _, err := Read(httptest.NewRecorder(), r, 1000, b.Ticket()); !errors.Is(err, ErrBusy) {
		t.Fatalf("declared length over the budget = %v, want ErrBusy", err)
	}
	r.ContentLength = 2000
	if _, err := Read(httptest.NewRecorder(), r, 1000, b.Ticket()); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("declared length over the cap = %v, want ErrTooLarge", err)
	}
}

func TestReadUnknownLengthChargedAsItGrows(t *testing.T) {
	b := NewBudget(4 << 10)
	body := strings.Repeat("x", 3000)
	r := httptest.NewRequest("POST", "/", strings.NewReader(body))
	r.ContentLength = -1
	tk := b.Ticket()
	got, err := Read(httptest.NewRecorder(), r, 1<<20, tk)
	if err != nil || string(got) != body || !tk.Read() {
		t.Fatalf("read = %d bytes, %v", len(got), err)
	}
	if b.InUse() < 3000 {
		t.Fatalf("in use = %d, want the buffer's capacity charged", b.InUse())
	}
	tk.Release()
	r = httptest.NewRequest("POST", "/", strings.NewReader(strings.Repeat("x", 64<<10)))
	r.ContentLength = -1
	if _, err := Read(httptest.NewRecorder(), r, 1<<20, b.Ticket()); !errors.Is(err, ErrBusy) {
		t.Fatalf("unknown length past the budget = %v, want ErrBusy", err)
	}
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, io.ErrUnexpectedEOF }
