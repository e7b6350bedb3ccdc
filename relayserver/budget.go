package relayserver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"

	"github.com/agentmbx/agentmbx/internal/bodylimit"
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
)

// ticketOf is the request's share of the body budget (nil when it has none).
func ticketOf(ctx context.Context) *bodylimit.Ticket {
	if st := stateOf(ctx); st != nil {
		return st.ticket
	}
	return nil
}

// unread reports whether r carries a body that was not read to its end: a refusal then closes
// the connection, so net/http does not read what the relay refused.
func unread(r *http.Request) bool {
	t := ticketOf(r.Context())
	return t != nil && !t.Read() && r.ContentLength != 0
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

// readBody reads the whole body of r within the request's ticket on the body budget
// (bodylimit.Read): over max it is ErrTooLarge, over the budget ErrBusy (before anything is read
// when the length is declared).
func readBody(w http.ResponseWriter, r *http.Request, max int64) ([]byte, error) {
	body, err := bodylimit.Read(w, r, max, ticketOf(r.Context()))
	switch {
	case err == nil:
		return body, nil
	case errors.Is(err, bodylimit.ErrTooLarge):
		return nil, fmt.Errorf("%w: %v", ErrTooLarge, err)
	case errors.Is(err, bodylimit.ErrBusy):
		return nil, fmt.Errorf("%w: %v", ErrBusy, err)
	}
	return nil, fmt.Errorf("%w: reading body: %v", ErrBadRequest, err)
}
