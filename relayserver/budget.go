package relayserver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
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
// (bodylimit.Read): over max it is ErrTooLarge, past the budget or one of the request's shares of
// it ErrBusy (the rest unread). sc, when not nil, watches the bytes as they arrive and may refuse
// the body before the rest is read (its error is returned as it is).
func readBody(w http.ResponseWriter, r *http.Request, max int64, sc bodylimit.Scanner) ([]byte, error) {
	body, err := bodylimit.Read(w, r, max, ticketOf(r.Context()), sc)
	var se *scanError
	switch {
	case err == nil:
		return body, nil
	case errors.As(err, &se):
		return nil, se.err
	case errors.Is(err, bodylimit.ErrTooLarge):
		return nil, fmt.Errorf("%w: %v", ErrTooLarge, err)
	case errors.Is(err, bodylimit.ErrBusy):
		return nil, fmt.Errorf("%w: %v", ErrBusy, err)
	}
	return nil, fmt.Errorf("%w: reading body: %v", ErrBadRequest, err)
}

// addressShares returns the shares of a budget of 8×eighth bytes a request's client address
// counts against (an IPv6 address also at /56 and /48), with room for one more share.
func (s *Server) addressShares(r *http.Request, eighth int64) []bodylimit.Share {
	keys := clientKeys(r, s.opt.TrustProxy)
	out := make([]bodylimit.Share, 0, len(keys)+1)
	for _, k := range keys {
		n := int64(shareAddress)
		switch k.scale {
		case 4:
			n = shareNet56
		case 16:
			n = shareNet48
		}
		out = append(out, bodylimit.Share{Key: "addr " + k.key, Max: n * eighth})
	}
	return out
}

// responseShares returns the shares of the response budget a pull answer counts against: its
// client address, as for bodies, and the host key it is for (at most a quarter of the budget).
func (s *Server) responseShares(r *http.Request, key string) []bodylimit.Share {
	eighth := s.opt.ResponseBudget / 8
	return append(s.addressShares(r, eighth), bodylimit.Share{Key: "key " + key, Max: shareKey * eighth})
}

// scanError is the refusal of a body by its scanner, returned by readBody as it is.
type scanError struct{ err error }

func (e *scanError) Error() string { return e.err.Error() }
func (e *scanError) Unwrap() error { return e.err }

// The shares of the body budget (docs/design.md: Quotas and bounds): no client address and no
// named key may hold more than these fractions of it, so that one address, or requests naming one
// key, cannot spend everyone's.
const (
	// shareAddress is an IPv4 address's or an IPv6 /64's share, in eighths of the budget;
	// shareNet56 and shareNet48 are those of the /56 and the /48 around it.
	shareAddress = 2
	shareNet56   = 3
	shareNet48   = 4
	// shareKey is the share of the requests that name one host key (x-mbx-key), or one host
	// name (a v1 hop's x-mbx-host), before their hop is verified.
	shareKey = 2
)

// budgetShares returns the shares of the body budget a request counts against: its client
// address (an IPv6 address also at /56 and /48) and the key or name its hop headers claim.
func (s *Server) budgetShares(r *http.Request) []bodylimit.Share {
	eighth := s.opt.BodyBudget / 8
	out := s.addressShares(r, eighth)
	if k := r.Header.Get(hdrKey); k != "" {
		out = append(out, bodylimit.Share{Key: "key " + k, Max: shareKey * eighth})
	} else if h := r.Header.Get(hdrHost); h != "" {
		out = append(out, bodylimit.Share{Key: "host " + strings.ToLower(h), Max: shareKey * eighth})
	}
	return out
}
