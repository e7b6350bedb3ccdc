package relayserver

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentmbx/agentmbx/internal/bodylimit"
	"github.com/agentmbx/agentmbx/internal/logkey"
)

// HeaderRequestID carries a request's id: taken from the request when it is a short token (a
// proxy's id), else made here, and always sent back.
const HeaderRequestID = "X-Request-Id"

// opsState is what health, readiness and request ids need.
type opsState struct {
	draining atomic.Bool  // Shutdown began: not ready
	lastBeat atomic.Int64 // unix ms of the last heartbeat this server wrote
	idPrefix string
	idSeq    atomic.Uint64

	probeMu  sync.Mutex
	probeAt  time.Time
	probeErr error
}

func (o *opsState) init(now time.Time) {
	o.lastBeat.Store(now.UnixMilli())
	var b [4]byte
	_, _ = rand.Read(b[:])
	o.idPrefix = hex.EncodeToString(b[:])
}

type ctxKey struct{}

// reqState is what the request plumbing keeps of a request, in its context under ctxKey: the
// request id (serveObserved) and the request's share of the body budget (admit; nil for a
// request without a body).
type reqState struct {
	id     string
	ticket *bodylimit.Ticket
}

func stateOf(ctx context.Context) *reqState {
	st, _ := ctx.Value(ctxKey{}).(*reqState)
	return st
}

// RequestID returns the id of the request whose context ctx is ("" outside one).
func RequestID(ctx context.Context) string {
	if st := stateOf(ctx); st != nil {
		return st.id
	}
	return ""
}

// requestID is the id of r: a proxy's X-Request-Id when it is 1 to 64 characters of
// [A-Za-z0-9._:-], else one made here (this process's random prefix and a counter).
func (s *Server) requestID(r *http.Request) string {
	if id := r.Header.Get(HeaderRequestID); validRequestID(id) {
		return id
	}
	var b [32]byte // prefix (8), dash, counter (at most 20): only the string is allocated
	return string(strconv.AppendUint(append(append(b[:0], s.ops.idPrefix...), '-'), s.ops.idSeq.Add(1), 10))
}

func validRequestID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == ':' || c == '-') {
			return false
		}
	}
	return true
}

// statusWriter remembers the status a handler answered with.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// serveObserved serves r with a request id in its context and its answer header, then counts it
// (metrics by route and status) and logs it at debug level.
func (s *Server) serveObserved(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	o := &observed{statusWriter: statusWriter{ResponseWriter: w}} // one allocation for both
	o.state.id = s.requestID(r)
	w.Header()[HeaderRequestID] = []string{o.state.id}
	r = r.WithContext(context.WithValue(r.Context(), ctxKey{}, &o.state))
	s.admit(&o.statusWriter, r, &o.state)
	sw := &o.statusWriter
	if sw.status == 0 {
		sw.status = http.StatusOK
	}
	route := r.Pattern // set by the mux on the request it served
	if route == "" || route == "/" {
		route = "other" // unknown paths share one series
	}
	took := time.Since(start)
	s.met.request(s, route, sw.status, took)
	if s.log.Enabled(r.Context(), slog.LevelDebug) { // the attributes cost allocations
		s.log.Debug("relay request", logkey.Req, o.state.id, logkey.Method, r.Method, logkey.Route, route,
			logkey.Status, sw.status, logkey.MS, took.Milliseconds())
	}
}

// observed is a request's writer and its state, allocated together.
type observed struct {
	statusWriter
	state reqState
}

// opsRoutes adds the health endpoints and, with a token, the metrics.
func (s *Server) opsRoutes(m *http.ServeMux) {
	m.HandleFunc("GET /healthz", s.handleHealthz)
	m.HandleFunc("GET /readyz", s.handleReadyz)
	if s.met != nil && s.opt.MetricsToken != "" {
		h := s.met.Handler()
		want := []byte("Bearer " + s.opt.MetricsToken)
		m.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
			if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
				s.writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "metrics need the bearer token"})
				return
			}
			h.ServeHTTP(w, r)
		})
	}
}

// OpsHandler serves GET /metrics (without a token: bind it to a private address), /healthz and
// /readyz, for `relay serve --metrics-listen`.
func (s *Server) OpsHandler() http.Handler {
	m := http.NewServeMux()
	m.HandleFunc("GET /healthz", s.handleHealthz)
	m.HandleFunc("GET /readyz", s.handleReadyz)
	if s.met != nil {
		m.Handle("GET /metrics", s.met.Handler())
	}
	return m
}

// handleHealthz is GET /healthz: the process answers.
func (s *Server) handleHealthz(w http.ResponseWriter, _ *http.Request) {
	s.writeJSON(w, http.StatusOK, map[string]bool{"ok": true})
}

// Readiness is the answer of GET /readyz.
type Readiness struct {
	Ready bool `json:"ready"`
	// Checks names each check with "ok" or what is wrong (never a store error's text, which
	// goes to the log).
	Checks map[string]string `json:"checks"`
}

// Ready runs the readiness checks: the epoch is loaded, the heartbeat was written within three
// heartbeat intervals, the store takes a write now (a heartbeat, at most one a second however
// often it is asked), and the server is not shutting down.
func (s *Server) Ready(ctx context.Context) Readiness {
	rd := Readiness{Ready: true, Checks: map[string]string{"epoch": "ok", "heartbeat": "ok", "store": "ok", "serving": "ok"}}
	fail := func(check, why string) { rd.Ready, rd.Checks[check] = false, why }
	if s.epoch == "" {
		fail("epoch", "not loaded")
	}
	now := s.opt.Clock()
	if last := time.UnixMilli(s.ops.lastBeat.Load()); now.Sub(last) > 3*s.opt.HeartbeatEvery {
		fail("heartbeat", "stale since "+last.UTC().Format(time.RFC3339))
	}
	if err := s.probeWrite(ctx, now); err != nil {
		fail("store", "not writable")
	}
	if s.ops.draining.Load() {
		fail("serving", "shutting down")
	}
	return rd
}

// probeWrite writes the heartbeat to prove the store takes writes, at most once a second (of
// Options.Clock).
func (s *Server) probeWrite(ctx context.Context, now time.Time) error {
	s.ops.probeMu.Lock()
	defer s.ops.probeMu.Unlock()
	if !s.ops.probeAt.IsZero() && s.opt.Clock().Sub(s.ops.probeAt) < time.Second {
		return s.ops.probeErr
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	s.ops.probeErr = s.store.Heartbeat(ctx, now)
	s.ops.probeAt = s.opt.Clock()
	if s.ops.probeErr != nil {
		s.log.Warn("readiness: the store refused a write", logkey.Err, s.ops.probeErr)
	}
	return s.ops.probeErr
}

// handleReadyz is GET /readyz: 200 when Ready, else 503, with the checks.
func (s *Server) handleReadyz(w http.ResponseWriter, r *http.Request) {
	rd := s.Ready(r.Context())
	status := http.StatusOK
	if !rd.Ready {
		status = http.StatusServiceUnavailable
	}
	s.writeJSON(w, status, rd)
}

// RunHeartbeat writes the heartbeat every interval (mbx.RelayHeartbeat, 30 s, in Serve) until
// ctx ends; a failed write is logged and the next tick tries again.
func (s *Server) RunHeartbeat(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := s.Heartbeat(ctx); err != nil && ctx.Err() == nil {
				s.log.Warn("heartbeat failed", logkey.Err, err)
			}
		}
	}
}

// Heartbeat writes now as the store's heartbeat (docs/design.md: Epochs, restarts and restores)
// and, when it committed, counts it for readiness. Serve calls it every ServeConfig.HeartbeatEvery;
// a caller running the Server itself calls it every Options.HeartbeatEvery.
func (s *Server) Heartbeat(ctx context.Context) error {
	now := s.opt.Clock()
	if err := s.store.Heartbeat(ctx, now); err != nil {
		return err
	}
	s.ops.lastBeat.Store(now.UnixMilli())
	return nil
}
