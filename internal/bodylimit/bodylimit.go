// Package bodylimit bounds the request body bytes a server holds at once: a shared budget that a
// request draws on before it reads (its declared length) or as its buffer grows (a body of
// unknown length), and a reader whose buffer grows with the bytes that arrive, never sized from
// Content-Length.
package bodylimit

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
)

var (
	// ErrBusy is returned by Read when the budget cannot hold the body: nothing was read when
	// the body declared its length.
	ErrBusy = errors.New("request body budget spent")
	// ErrTooLarge is returned by Read for a body over its cap.
	ErrTooLarge = errors.New("request body too large")
)

// SmallBody is the size up to which a body may use the budget's last eighth: large bodies never
// take it all, so small requests still get through while large ones hold the rest.
const SmallBody = 64 << 10

// Budget counts the body bytes in flight against a total.
type Budget struct {
	mu    sync.Mutex
	total int64
	used  int64
}

// NewBudget returns a budget of total bytes.
func NewBudget(total int64) *Budget { return &Budget{total: total} }

// take reserves n bytes and reports whether they fitted. A reservation over SmallBody must leave
// an eighth of the total free.
func (b *Budget) take(n int64) bool {
	if n <= 0 {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	limit := b.total
	if n > SmallBody {
		limit -= b.total / 8
	}
	if b.used+n > limit {
		return false
	}
	b.used += n
	return true
}

// InUse returns the bytes reserved now.
func (b *Budget) InUse() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// Ticket is one request's share of a budget. Release returns it in full; call it when the
// request's handler is done with the body.
type Ticket struct {
	b    *Budget
	held int64
	read bool
}

// Ticket starts a request's share of b.
func (b *Budget) Ticket() *Ticket { return &Ticket{b: b} }

// Take reserves n more bytes for the request. A nil ticket takes anything.
func (t *Ticket) Take(n int64) bool {
	if t == nil {
		return true
	}
	if !t.b.take(n) {
		return false
	}
	t.held += n
	return true
}

// Release gives back everything the request holds.
func (t *Ticket) Release() {
	if t == nil {
		return
	}
	t.b.mu.Lock()
	t.b.used -= t.held
	t.b.mu.Unlock()
	t.held = 0
}

// Read reports whether the request's body was read to its end by Read.
func (t *Ticket) Read() bool { return t != nil && t.read }

// Read reads the whole body of r, refusing more than max bytes while streaming (ErrTooLarge).
// The bytes are taken from t before they are read: a declared Content-Length at once (ErrBusy,
// with nothing read, when it does not fit), a body of unknown length as its buffer grows. Other
// read failures are returned as they are.
func Read(w http.ResponseWriter, r *http.Request, max int64, t *Ticket) ([]byte, error) {
	if r.ContentLength > max {
		return nil, fmt.Errorf("%w: %d bytes, the cap is %d", ErrTooLarge, r.ContentLength, max)
	}
	take, size := t.Take, int64(512)
	if r.ContentLength >= 0 {
		if !t.Take(r.ContentLength) {
			return nil, ErrBusy
		}
		take = nil // net/http reads no more than the declared length
		// The whole declared body at once (and a byte for the end), when the budget holds it.
		size = r.ContentLength + 1
		if t == nil {
			size = min(size, SmallBody)
		}
	}
	body, err := readGrowing(http.MaxBytesReader(w, r.Body, max), take, size)
	if err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			return nil, fmt.Errorf("%w: the cap is %d bytes", ErrTooLarge, max)
		}
		return nil, err
	}
	if t != nil {
		t.read = true
	}
	return body, nil
}

// readGrowing reads rd to its end into a buffer of size bytes that grows as bytes arrive. take,
// when not nil, is asked for every byte of capacity before the buffer grows to it.
func readGrowing(rd io.Reader, take func(int64) bool, size int64) ([]byte, error) {
	var held int64
	body := make([]byte, 0, size)
	for {
		if len(body) == cap(body) {
			body = append(body, 0)[:len(body)]
		}
		if c := int64(cap(body)); take != nil && c > held {
			if !take(c - held) {
				return nil, ErrBusy
			}
			held = c
		}
		n, err := rd.Read(body[len(body):cap(body)])
		body = body[:len(body)+n]
		if errors.Is(err, io.EOF) {
			return body, nil
		}
		if err != nil {
			return nil, err
		}
	}
}
