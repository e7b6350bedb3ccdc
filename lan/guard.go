package lan

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"golang.org/x/net/netutil"

	"github.com/agentmbx/agentmbx/internal/bodylimit"
	"github.com/agentmbx/agentmbx/internal/logkey"
)

// Defaults of the LAN server's bounds. Everything before a verified hop is hostile: these hold
// what strangers on the network can make the daemon hold.
const (
	// DefaultMaxConns is how many LAN connections are served at once; more wait in the kernel's
	// backlog until one closes.
	DefaultMaxConns = 64
	// DefaultBodyBudget is the LAN server's budget of body bytes in flight.
	DefaultBodyBudget = 16 << 20
	// DefaultRotationsPerSecond and DefaultRotationBurst bound POST /v1/rotate across all
	// callers: a peer's rotation arrives once per rotation (retried on 429), and each call costs
	// a store transaction and two signature checks.
	DefaultRotationsPerSecond = 2
	DefaultRotationBurst      = 10
	// refusalLogEvery is how often refused requests are logged: one line with the count since
	// the last, not one per request.
	refusalLogEvery = time.Minute
)

// Limit wraps the LAN listener ln so that at most ServerOptions.MaxConns connections are served
// at once (netutil.LimitListener).
func (s *Server) Limit(ln net.Listener) net.Listener {
	return netutil.LimitListener(ln, s.opt.MaxConns)
}

// Handler is what to serve on the LAN listener: the mux, with each request's ticket on the body
// budget returned when its handler is done.
func (s *Server) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t := s.budget.Ticket()
		defer t.Release()
		s.mux.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), ticketKey{}, t)))
	})
}

type ticketKey struct{}

func ticketOf(r *http.Request) *bodylimit.Ticket {
	t, _ := r.Context().Value(ticketKey{}).(*bodylimit.Ticket)
	return t
}

// BodyBytesInFlight is what the LAN server's body budget holds now.
func (s *Server) BodyBytesInFlight() int64 { return s.budget.InUse() }

// refusals counts the LAN requests refused before their hop verified and logs them at most once
// per refusalLogEvery, with the count and the latest one, so a flood of strangers cannot flood
// the log.
type refusals struct {
	mu     sync.Mutex
	log    *slog.Logger
	clock  func() time.Time
	count  int
	logged time.Time
}

func (f *refusals) note(peer, path, reason string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.count++
	now := f.clock()
	if !f.logged.IsZero() && now.Sub(f.logged) < refusalLogEvery {
		return
	}
	f.log.Warn("LAN requests refused", logkey.Count, f.count, logkey.Since, f.logged, logkey.LastPeer, peer,
		logkey.Path, path, logkey.LastReason, reason)
	f.count, f.logged = 0, now
}
