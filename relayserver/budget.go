package relayserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
)

// Defaults of the request budget.
const (
	// DefaultBodyBudget is the relay-wide budget of request body bytes in flight.
	DefaultBodyBudget = 64 << 20
	// DefaultMaxPerClient is how many requests with a body one client address may have in flight.
	DefaultMaxPerClient = 16
	// DefaultMaxSendersBody caps a sender allowlist's body: 1,024 keys of 44 characters, quoted,
	// plus the record around them, fit in well under 64 KiB.
	DefaultMaxSendersBody = 64 << 10
	// smallBody is the size up to which a body may use the budget's last eighth: large bodies
	// never take it all, so small requests (acks, enrolment, allowlists) still get through while
	// large pushes hold the rest.
	smallBody = 64 << 10
)

// budget is a relay-wide count of body bytes in flight. Bytes are taken before they are read
// and given back when the request's handler returns.
type budget struct {
	mu    sync.Mutex
	total int64
	used  int64
}

// take reserves n bytes and reports whether they fitted. A reservation over smallBody must leave
// an eighth of the total free.
func (b *budget) take(n int64) bool {
	if n <= 0 {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	limit := b.total
	if n > smallBody {
		limit -= b.total / 8
	}
	if b.used+n > limit {
		return false
	}
	b.used += n
	return true
}

func (b *budget) give(n int64) {
	b.mu.Lock()
	b.used -= n
	b.mu.Unlock()
}

func (b *budget) inUse() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// ticket is one request's share of the budget, returned in full when the request ends.
type ticket struct {
	b    *budget
	held int64
	read bool // the body was read to its end
}

func (t *ticket) take(n int64) bool {
	if t == nil {
		return true
	}
	if !t.b.take(n) {
		return false
	}
	t.held += n
	return true
}

func (t *ticket) release() {
	if t != nil {
		t.b.give(t.held)
		t.held = 0
	}
}

type ticketKey struct{}

// unread reports whether r carries a body that was not read to its end: a refusal then closes
// the connection, so net/http does not read what the relay refused.
func unread(r *http.Request) bool {
	t := ticketOf(r.Context())
	return t != nil && !t.read && r.ContentLength != 0
}

func ticketOf(ctx context.Context) *ticket {
	t, _ := ctx.Value(ticketKey{}).(*ticket)
	return t
}

// inflight counts the requests with a body that each client address has in flight. It holds
// only addresses with requests in flight, so it is bounded by the open connections.
type inflight struct {
	mu  sync.Mutex
	max int
	m   map[string]int
}

func (f *inflight) acquire(key string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.m[key] >= f.max {
		return false
	}
	f.m[key]++
	return true
}

func (f *inflight) release(key string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.m[key] <= 1 {
		delete(f.m, key)
		return
	}
	f.m[key]--
}

// readBody reads the whole body of r, refusing more than max bytes while streaming. The bytes
// are taken from the request's ticket before they are read: a declared Content-Length at once
// (ErrBusy, with nothing read, when it does not fit), a body of unknown length as its buffer
// grows. The buffer grows with the bytes that arrive; a declared length sizes nothing.
func readBody(w http.ResponseWriter, r *http.Request, max int64) ([]byte, error) {
	if r.ContentLength > max {
		return nil, fmt.Errorf("%w: %d bytes, the cap is %d", ErrTooLarge, r.ContentLength, max)
	}
	t := ticketOf(r.Context())
	take := t.take
	if r.ContentLength >= 0 {
		if !t.take(r.ContentLength) {
			return nil, fmt.Errorf("%w: request body budget spent", ErrBusy)
		}
		take = nil // net/http reads no more than the declared length
	}
	body, err := readGrowing(http.MaxBytesReader(unwrapWriter(w), r.Body, max), take)
	if err != nil {
		var mb *http.MaxBytesError
		switch {
		case errors.As(err, &mb):
			return nil, fmt.Errorf("%w: the cap is %d bytes", ErrTooLarge, max)
		case errors.Is(err, ErrBusy):
			return nil, err
		}
		return nil, fmt.Errorf("%w: reading body: %v", ErrBadRequest, err)
	}
	if t != nil {
		t.read = true
	}
	return body, nil
}

// readGrowing reads rd to its end into a buffer that grows as bytes arrive. take, when not nil,
// is asked for every byte of capacity before the buffer grows to it.
func readGrowing(rd io.Reader, take func(int64) bool) ([]byte, error) {
	var held int64
	body := make([]byte, 0, 512)
	for {
		if len(body) == cap(body) {
			body = append(body, 0)[:len(body)]
		}
		if c := int64(cap(body)); take != nil && c > held {
			if !take(c - held) {
				return nil, fmt.Errorf("%w: request body budget spent", ErrBusy)
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
