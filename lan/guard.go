package lan

import (
	"container/list"
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/time/rate"

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
	// DefaultRotationsPerSecond and DefaultRotationBurst bound POST /v1/rotate per client
	// address: a peer's rotation arrives once per rotation (retried on 429), and each call costs
	// a store transaction and two signature checks.
	DefaultRotationsPerSecond = 2
	DefaultRotationBurst      = 10
	// DefaultRotationAddrs is how many client addresses the POST /v1/rotate limiter remembers.
	DefaultRotationAddrs = 1024
	// refusalLogEvery is how often refused requests are logged: one line with the count since
	// the last, not one per request.
	refusalLogEvery = time.Minute
)

// Limit wraps the LAN listener ln so that at most ServerOptions.MaxConns connections are served
// at once, at most ServerOptions.MaxConnsPerAddr from one client address (LimitListener); the
// connections refused for their address are logged with the other refusals.
func (s *Server) Limit(ln net.Listener) net.Listener {
	return LimitListener(ln, s.opt.MaxConns, s.opt.MaxConnsPerAddr, func(addr string) {
		s.refused.note(addr, "", "too many connections from this address")
	})
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

// addrLimiter holds one token bucket per client address (golang.org/x/time/rate) in a bounded
// LRU, so that one address draining its bucket leaves the others theirs. A full table forgets its
// least recently used bucket only once that bucket has refilled (forgetting it loses nothing);
// otherwise an address it does not hold shares one overflow bucket, so churning through new
// addresses never resets a bucket that still counts, and never holds more than max of them.
type addrLimiter struct {
	mu       sync.Mutex
	every    rate.Limit
	burst    int
	max      int
	ll       *list.List // of *addrBucket, most recently used first
	m        map[string]*list.Element
	overflow *rate.Limiter
}

type addrBucket struct {
	addr string
	lim  *rate.Limiter
}

func newAddrLimiter(every rate.Limit, burst, max int) *addrLimiter {
	return &addrLimiter{every: every, burst: burst, max: max, ll: list.New(), m: map[string]*list.Element{},
		overflow: rate.NewLimiter(every, burst)}
}

// allow takes a token of r's client address at now and reports whether there was one.
func (l *addrLimiter) allow(r *http.Request, now time.Time) bool {
	addr := clientAddr(r)
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.bucket(addr, now).AllowN(now, 1)
}

// bucket returns addr's bucket, making one when there is room. Called with l.mu held.
func (l *addrLimiter) bucket(addr string, now time.Time) *rate.Limiter {
	if e, ok := l.m[addr]; ok {
		l.ll.MoveToFront(e)
		return e.Value.(*addrBucket).lim
	}
	if l.ll.Len() >= l.max {
		tail := l.ll.Back()
		old := tail.Value.(*addrBucket)
		if old.lim.TokensAt(now) < float64(old.lim.Burst()) {
			return l.overflow
		}
		l.ll.Remove(tail)
		delete(l.m, old.addr)
	}
	b := &addrBucket{addr: addr, lim: rate.NewLimiter(l.every, l.burst)}
	l.m[addr] = l.ll.PushFront(b)
	return b.lim
}

// clientAddr is the address of r's TCP peer (the LAN server trusts no proxy header). Each
// address counts alone, IPv6 ones too: the hosts of one LAN share their /64.
func clientAddr(r *http.Request) string {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return ap.Addr().Unmap().String()
}
