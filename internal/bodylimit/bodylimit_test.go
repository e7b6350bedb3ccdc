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
		t.Fatalf("large bodies may take 7/8 of the budget and no more (in use %d)", b.InUse())
	}
	small := b.Ticket()
	if !small.Take(SmallBody) {
		t.Fatal("a small body did not fit in the reserve")
	}
	if small.Take(1) {
		t.Fatal("a body past SmallBody took from the reserve")
	}
	big.Release()
	small.Release()
	if b.InUse() != 0 {
		t.Fatalf("in use after release = %d", b.InUse())
	}
}

func TestSharesBoundEachKey(t *testing.T) {
	b := NewBudget(1 << 20)
	addr := Share{Key: "addr 192.0.2.1", Max: 256 << 10}
	k := Share{Key: "key K", Max: 300 << 10}
	one := b.Ticket(addr, k)
	if !one.Take(200<<10) || one.Take(100<<10) {
		t.Fatalf("one address took past its share: holds %d", one.Held())
	}
	two := b.Ticket(addr)
	if two.Take(100 << 10) {
		t.Fatal("a second request of the address took past the address's share")
	}
	other := b.Ticket(Share{Key: "addr 192.0.2.2", Max: 256 << 10}, k)
	if !other.Take(100<<10) || other.Take(1) {
		t.Fatalf("the named key's share: another address took %d, want 100 KiB then nothing", other.Held())
	}
	if got := b.ShareInUse(k.Key); got != 300<<10 {
		t.Fatalf("key share in use = %d", got)
	}
	one.Release()
	two.Release()
	other.Release()
	if b.InUse() != 0 || b.ShareInUse(addr.Key) != 0 || b.ShareInUse(k.Key) != 0 || len(b.shares) != 0 {
		t.Fatalf("after release: in use %d, shares %v", b.InUse(), b.shares)
	}
}

// blockingBody is a body whose bytes never come: it says when it is first read, and ends when
// done is closed.
type blockingBody struct{ reading, done chan struct{} }

func (b blockingBody) Read([]byte) (int, error) {
	select {
	case b.reading <- struct{}{}:
	default:
	}
	<-b.done
	return 0, io.ErrUnexpectedEOF
}

func TestHeadersAloneHoldNothing(t *testing.T) {
	b := NewBudget(100)
	body := blockingBody{reading: make(chan struct{}, 1), done: make(chan struct{})}
	r := httptest.NewRequest("POST", "/", body)
	r.ContentLength = 8 << 20 // declared, never sent
	tk := b.Ticket(Share{Key: "addr", Max: 10})
	errc := make(chan error, 1)
	go func() {
		_, err := Read(httptest.NewRecorder(), r, 16<<20, tk, nil)
		errc <- err
	}()
	<-body.reading // the reader waits for bytes that do not come: nothing may be held
	if b.InUse() != 0 || b.ShareInUse("addr") != 0 {
		t.Fatalf("a body with no bytes arrived holds %d", b.InUse())
	}
	close(body.done)
	if err := <-errc; !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("read = %v", err)
	}
}

func TestReadChargesWhatArrived(t *testing.T) {
	b := NewBudget(4 << 10)
	body := strings.Repeat("x", 3000)
	r := httptest.NewRequest("POST", "/", strings.NewReader(body))
	r.ContentLength = 1 << 20 // declared far over the budget: only arrived bytes count
	tk := b.Ticket()
	got, err := Read(httptest.NewRecorder(), r, 2<<20, tk, nil)
	if err != nil || string(got) != body || !tk.Read() {
		t.Fatalf("read = %d bytes, %v", len(got), err)
	}
	if h := tk.Held(); h < 3000-firstRead || h > 2*3000 {
		t.Fatalf("held %d for 3000 bytes, want between what arrived (less the first read) and twice it", h)
	}
	tk.Release()
	r = httptest.NewRequest("POST", "/", strings.NewReader(strings.Repeat("x", 64<<10)))
	r.ContentLength = -1
	busy := b.Ticket()
	if _, err := Read(httptest.NewRecorder(), r, 1<<20, busy, nil); !errors.Is(err, ErrBusy) {
		t.Fatalf("a body past the budget = %v, want ErrBusy", err)
	}
	busy.Release()
	if b.InUse() != 0 {
		t.Fatalf("in use after the refused read's release = %d", b.InUse())
	}
	r = httptest.NewRequest("POST", "/", errReader{})
	r.ContentLength = 2000
	if _, err := Read(httptest.NewRecorder(), r, 1000, b.Ticket(), nil); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("declared length over the cap = %v, want ErrTooLarge", err)
	}
}

func TestReadNeverGrowsPastTheDeclaredLength(t *testing.T) {
	b := NewBudget(1 << 30)
	body := strings.Repeat("x", 5000)
	r := httptest.NewRequest("POST", "/", strings.NewReader(body))
	tk := b.Ticket()
	got, err := Read(httptest.NewRecorder(), r, 1<<20, tk, nil)
	if err != nil || len(got) != 5000 {
		t.Fatalf("read = %d, %v", len(got), err)
	}
	if c := cap(got); c > 5001 {
		t.Fatalf("buffer capacity %d for a body declared 5000", c)
	}
}

// countingReader counts the bytes read from it.
type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

type refuseAfter struct {
	seen, at int
	err      error
}

func (s *refuseAfter) Scan(chunk []byte) error {
	s.seen += len(chunk)
	if s.seen >= s.at {
		return s.err
	}
	return nil
}

func TestScannerRefusesBeforeTheRest(t *testing.T) {
	b := NewBudget(1 << 30)
	src := &countingReader{r: strings.NewReader(strings.Repeat("y", 1<<20))}
	r := httptest.NewRequest("POST", "/", src)
	r.ContentLength = -1
	refused := errors.New("refused")
	sc := &refuseAfter{at: 4 << 10, err: refused}
	tk := b.Ticket()
	if _, err := Read(httptest.NewRecorder(), r, 2<<20, tk, sc); !errors.Is(err, refused) {
		t.Fatalf("read = %v, want the scanner's error", err)
	}
	if src.n > 16<<10 || tk.Read() {
		t.Fatalf("%d bytes read after the scanner refused at 4 KiB (read to the end: %v)", src.n, tk.Read())
	}
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, io.ErrUnexpectedEOF }
