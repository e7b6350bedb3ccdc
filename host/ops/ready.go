package ops

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/agentmbx/agentmbx/internal/logkey"
)

// Readiness is the answer of GET /readyz.
type Readiness struct {
	Ready bool `json:"ready"`
	// Checks names each check with "ok" or what is wrong.
	Checks map[string]string `json:"checks"`
}

// ProbeEvery is how long the result of a store write probe is reused.
const ProbeEvery = time.Second

// Checker runs the readiness checks: the daemon serves the host, and the store takes a write now
// (at most one probe write every ProbeEvery, however often it is asked).
type Checker struct {
	serving func() bool
	write   func() error
	log     *slog.Logger

	mu      sync.Mutex
	probeAt time.Time // wall clock: a fake host clock does not hold the cache
	err     error
}

// NewChecker returns a Checker. serving reports whether the daemon serves the host; write writes
// something small to the store and returns its error.
func NewChecker(serving func() bool, write func() error, log *slog.Logger) *Checker {
	return &Checker{serving: serving, write: write, log: log}
}

// Ready runs the checks.
func (c *Checker) Ready(_ context.Context) Readiness {
	rd := Readiness{Ready: true, Checks: map[string]string{"daemon": "ok", "store": "ok"}}
	if !c.serving() {
		rd.Ready, rd.Checks["daemon"] = false, "not serving"
	}
	if err := c.probe(); err != nil {
		rd.Ready, rd.Checks["store"] = false, "not writable"
	}
	return rd
}

func (c *Checker) probe() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.probeAt.IsZero() && time.Since(c.probeAt) < ProbeEvery {
		return c.err
	}
	c.err = c.write()
	c.probeAt = time.Now()
	if c.err != nil {
		c.log.Warn("readiness: the store refused a write", logkey.Err, c.err)
	}
	return c.err
}

// Handler serves GET /healthz (the process answers) and GET /readyz (c.Ready: 200 or 503) and
// passes every other request to next (404 when next is nil).
func (c *Checker) Handler(next http.Handler) http.Handler {
	m := http.NewServeMux()
	m.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]bool{"ok": true})
	})
	m.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		rd := c.Ready(r.Context())
		status := http.StatusOK
		if !rd.Ready {
			status = http.StatusServiceUnavailable
		}
		writeJSON(w, status, rd)
	})
	if next != nil {
		m.Handle("/", next)
	}
	return m
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
