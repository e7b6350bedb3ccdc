package host

import (
	"context"
	"testing"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/outbox"
)

// TestRetryOutboxMakesRowsDueNow: with the clock stopped, a row in backoff is not sent by a pass;
// RetryOutbox makes it due and the next pass delivers it. Unknown ids change nothing.
func TestRetryOutboxMakesRowsDueNow(t *testing.T) {
	clock := newClock()
	a, b, c := newTestHost(t, "alpha", clock), newTestHost(t, "beta", clock), newTestHost(t, "gamma", clock)
	pairAll(t, a, b, c)
	ctx := context.Background()
	b.gate.setDown(true)
	c.gate.setDown(true)
	res := a.send("alice", []string{"bob@beta"}, "retry", "now please")
	other := a.send("alice", []string{"carol@gamma"}, "other", "still waiting")
	if n, err := a.pass(ctx, true); err != nil || n != 2 {
		t.Fatalf("first pass sent %d, %v; want 2", n, err)
	}
	b.gate.setDown(false)
	c.gate.setDown(false)
	if n, _ := a.pass(ctx, true); n != 0 {
		t.Fatalf("a pass during backoff sent %d rows", n)
	}

	if _, err := a.RetryOutbox(ctx, api.RetryRequest{IDs: []string{res.ID, "01JZZZZZZZZZZZZZZZZZZZZZZZ"}}); api.CodeOf(err) != api.CodeNotFound {
		t.Fatalf("retry naming an unknown id = %v, want not found", err)
	}
	if n, _ := a.pass(ctx, true); n != 0 {
		t.Fatalf("a refused retry made %d rows due", n)
	}
	for _, req := range []api.RetryRequest{{}, {All: true, IDs: []string{res.ID}}, {IDs: []string{""}}} {
		if _, err := a.RetryOutbox(ctx, req); err == nil || api.CodeOf(err) != api.CodeBadRequest {
			t.Errorf("RetryOutbox(%+v) = %v, want bad request", req, err)
		}
	}

	got, err := a.RetryOutbox(ctx, api.RetryRequest{IDs: []string{res.ID}})
	if err != nil || got != (api.RetryResult{Due: 1}) {
		t.Fatalf("RetryOutbox = %+v, %v; want 1 due", got, err)
	}
	if n, err := a.pass(ctx, true); err != nil || n != 1 {
		t.Fatalf("pass after retry sent %d, %v; want 1", n, err)
	}
	if r := a.row(res.ID, "beta"); r.State != outbox.StateDone || r.Attempts != 2 {
		t.Fatalf("retried row %s after %d attempts, want done after 2", r.State, r.Attempts)
	}
	if r := a.row(other.ID, "gamma"); r.State != outbox.StatePending {
		t.Fatalf("the other row is %s, want still pending", r.State)
	}
	if got, err := a.RetryOutbox(ctx, api.RetryRequest{All: true}); err != nil || got != (api.RetryResult{Due: 1}) {
		t.Fatalf("RetryOutbox(all) = %+v, %v; want 1 due", got, err)
	}
	settle(t, a, b, c)
	if r := a.row(other.ID, "gamma"); r.State != outbox.StateDone {
		t.Fatalf("after retry --all the other row is %s, want done", r.State)
	}
}
