package host

import (
	"context"
	"net/http"
	"sync"

	"github.com/agentmbx/agentmbx/api"
)

// swapGate is how the daemon's listeners reach the open host: it serves the handler set last.
// While held (a key rotation closes the store and opens it again), new requests wait at the gate
// until the next set, and drain waits for the requests in flight; a request may leave the count
// early (detachRequest) when it is the one that asked for the swap.
type swapGate struct {
	mu       sync.Mutex
	cur      http.Handler
	err      error         // answered when cur is nil
	held     chan struct{} // non-nil while held; closed by set
	inflight sync.WaitGroup
}

// errRotationReopen answers requests once a rotation could not open the store again.
var errRotationReopen = api.NewError(api.CodeUnavailable, "the daemon could not open its store again after a key rotation",
	"start the daemon again: it finishes the rotation")

type detachKey struct{}

// detachRequest makes the request of ctx no longer count as in flight at its gate.
func detachRequest(ctx context.Context) {
	if done, ok := ctx.Value(detachKey{}).(func()); ok {
		done()
	}
}

func (g *swapGate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.mu.Lock()
	for g.held != nil {
		held := g.held
		g.mu.Unlock()
		select {
		case <-held:
		case <-r.Context().Done():
			return
		}
		g.mu.Lock()
	}
	h, err := g.cur, g.err
	if h == nil {
		g.mu.Unlock()
		if err == nil {
			err = api.NewError(api.CodeUnavailable, "the daemon is starting", "try again in a moment")
		}
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	g.inflight.Add(1)
	g.mu.Unlock()
	var once sync.Once
	done := func() { once.Do(g.inflight.Done) }
	defer done()
	h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), detachKey{}, done)))
}

// hold makes new requests wait until the next set.
func (g *swapGate) hold() {
	g.mu.Lock()
	if g.held == nil {
		g.held = make(chan struct{})
	}
	g.mu.Unlock()
}

// drain waits for the requests in flight (call it after hold).
func (g *swapGate) drain() { g.inflight.Wait() }

// set serves h from now on (err when h is nil) and lets the waiting requests in.
func (g *swapGate) set(h http.Handler, err error) {
	g.mu.Lock()
	g.cur, g.err = h, err
	if g.held != nil {
		close(g.held)
		g.held = nil
	}
	g.mu.Unlock()
}
