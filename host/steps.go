package host

import (
	"context"

	"github.com/agentmbx/agentmbx/inbox"
)

// Steps: what the daemon's loops run, one step at a time on the caller's goroutine. The
// deterministic simulation (package sim) drives hosts through these instead of RunDaemon; with
// Options.Serial and Options.RelayHTTPClient every effect of a step happens on the calling
// goroutine, in an order the caller controls.

// StepOutbox runs one outbox pass (as the outbox loop does at each tick) and returns when every
// send it started is recorded. It returns the number of rows it started sending.
func (h *Host) StepOutbox(ctx context.Context) (int, error) { return h.pass(ctx, true) }

// StepSweep runs the outbox sweep: rows past their deadline end with an alert; old rows are
// pruned. It returns the number of rows it ended.
func (h *Host) StepSweep(ctx context.Context) (int, error) { return h.sweep(ctx) }

// StepRelayKeep runs the enrolment and the publications that are due at the pinned relay.
func (h *Host) StepRelayKeep(ctx context.Context) error { return h.relay.Keep(ctx, false) }

// StepRelayPull pulls one page from the pinned relay, processes it and acks it.
func (h *Host) StepRelayPull(ctx context.Context) (inbox.StepResult, error) {
	return h.relay.PullStep(ctx)
}

// StepReleaseQuarantine reprocesses the quarantined relay items whose sender is paired now (what
// the daemon does when its relay loop starts).
func (h *Host) StepReleaseQuarantine() { h.relay.ReleaseHeld() }
