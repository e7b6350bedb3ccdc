// Package bodylimit bounds the request body bytes a server holds at once: a shared budget that a
// request draws on only as its bytes arrive (a declared Content-Length reserves nothing, so
// headers alone hold nothing), shared out among the request's shares (its client address, the key
// it names) so that no one of them can spend everyone's budget, and a reader whose buffer grows
// with the bytes that arrive, never sized from Content-Length.
package bodylimit

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
)

var (
	// ErrBusy is returned by Read when the budget, or one of the request's shares of it, cannot
	// hold the bytes that arrived: the rest of the body is not read.
	ErrBusy = errors.New("request body budget spent")
	// ErrTooLarge is returned by Read for a body over its cap.
	ErrTooLarge = errors.New("request body too large")
)

// SmallBody is the size up to which a body may use the budget's last eighth: large bodies never
// take it all, so small requests still get through while large ones hold the rest.
const SmallBody = 64 << 10

// firstRead is the buffer a body is first read into. It is allocated when the handler starts
// reading and is not charged: a request in flight costs more than that anyway (its goroutine, the
// connection's buffers), which the server bounds by limiting connections and requests in flight.
const firstRead = 512

// Share is a part of a budget that a request's bytes also count against: a client address, or
// the key a request names before it is authenticated. Requests with the same Key share Max bytes.
type Share struct {
	Key string
	Max int64
}

// Budget counts the body bytes in flight against a total, and against each share.
type Budget struct {
	mu     sync.Mutex
	total  int64
	used   int64
	shares map[string]int64 // share key → bytes held; only shares holding something
}

// NewBudget returns a budget of total bytes.
func NewBudget(total int64) *Budget { return &Budget{total: total, shares: map[string]int64{}} }

// take adds n bytes to a request that holds held already, when they fit: in the total (a request
// holding more than SmallBody must leave an eighth of it free) and in each of shares.
func (b *Budget) take(n, held int64, shares []Share) bool {
	if n <= 0 {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	limit := b.total
	if held+n > SmallBody {
		limit -= b.total / 8
	}
	if b.used+n > limit {
		return false
	}
	for _, s := range shares {
		if b.shares[s.Key]+n > s.Max {
			return false
		}
	}
	b.used += n
	for _, s := range shares {
		b.shares[s.Key] += n
	}
	return true
}

// InUse returns the bytes held now.
func (b *Budget) InUse() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// ShareInUse returns the bytes the requests of share key hold now.
func (b *Budget) ShareInUse(key string) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.shares[key]
}

// Ticket is one request's share of a budget. Release returns it in full; call it when the
// request's handler is done with the body.
type Ticket struct {
	b      *Budget
	shares []Share
	held   int64
	read   bool
}

// Ticket starts a request's share of b; its bytes count against the total and each of shares.
func (b *Budget) Ticket(shares ...Share) *Ticket { return &Ticket{b: b, shares: shares} }

// Take adds n more bytes to the request, when they fit. A nil ticket takes anything.
func (t *Ticket) Take(n int64) bool {
	if t == nil {
		return true
	}
	if !t.b.take(n, t.held, t.shares) {
		return false
	}
	t.held += n
	return true
}

// Held returns the bytes the request holds.
func (t *Ticket) Held() int64 {
	if t == nil {
		return 0
	}
	return t.held
}

// Release gives back everything the request holds.
func (t *Ticket) Release() {
	if t == nil || t.held == 0 {
		return
	}
	t.b.mu.Lock()
	t.b.used -= t.held
	for _, s := range t.shares {
		if t.b.shares[s.Key] -= t.held; t.b.shares[s.Key] <= 0 {
			delete(t.b.shares, s.Key)
		}
	}
	t.b.mu.Unlock()
	t.held = 0
}

// Read reports whether the request's body was read to its end by Read.
func (t *Ticket) Read() bool { return t != nil && t.read }

// Scanner watches a body as its bytes arrive (Read hands it each chunk in order) and may refuse it
// before the rest is read, by returning an error.
type Scanner interface {
	Scan(chunk []byte) error
}

// Read reads the whole body of r, refusing more than max bytes while streaming (ErrTooLarge).
// The buffer grows as bytes arrive, never past the declared length, and each growth is taken from
// t first (ErrBusy when it does not fit: nothing more is read). sc, when not nil, sees every chunk
// as it arrives; its error ends the read and is returned. Other read failures are returned as they
// are.
func Read(w http.ResponseWriter, r *http.Request, max int64, t *Ticket, sc Scanner) ([]byte, error) {
	if r.ContentLength > max {
		return nil, fmt.Errorf("%w: %d bytes, the cap is %d", ErrTooLarge, r.ContentLength, max)
	}
	most := max + 1 // a byte past the cap is what MaxBytesReader refuses
	if r.ContentLength >= 0 {
		most = r.ContentLength + 1 // and a byte past the declared length sees the end
	}
	body, err := readGrowing(http.MaxBytesReader(w, r.Body, max), t, sc, most)
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

// readGrowing reads rd to its end into a buffer that starts at firstRead bytes and doubles, up
// to most bytes, each time the bytes that arrived fill it: it never holds more than twice what
// arrived (and firstRead). t is asked for every byte of capacity past firstRead before the buffer
// grows to it.
func readGrowing(rd io.Reader, t *Ticket, sc Scanner, most int64) ([]byte, error) {
	first := min(int64(firstRead), most)
	body := make([]byte, 0, first)
	for {
		if len(body) == cap(body) {
			c := int64(cap(body))
			next := min(max(2*c, firstRead), max(most, c+1))
			if !t.Take(next - c) {
				return nil, ErrBusy
			}
			grown := make([]byte, len(body), next)
			copy(grown, body)
			body = grown
		}
		n, err := rd.Read(body[len(body):cap(body)])
		if n > 0 && sc != nil {
			if serr := sc.Scan(body[len(body) : len(body)+n]); serr != nil {
				return nil, serr
			}
		}
		body = body[:len(body)+n]
		if errors.Is(err, io.EOF) {
			return body, nil
		}
		if err != nil {
			return nil, err
		}
	}
}
