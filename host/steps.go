package host

import (
	"context"

	"github.com/agentmbx/agentmbx/relaylink"
)

// Steps: what the daemon's loops run, one step at a time on the caller's goroutine. The
// deterministic simulation (package sim) drives hosts through these instead of RunDaemon: the
// outbox steps here, the relay steps on the host's relay link (Relay: Keep, PullStep,
// ReleaseHeld). With Options.Serial and Options.RelayClient every effect of a step happens on
// the calling goroutine, in an order the caller controls.

// StepOutbox runs one outbox pass (as the outbox loop does at each tick) and returns when every
// send it started is recorded. It returns the number of rows it started sending.
func (h *Host) StepOutbox(ctx context.Context) (int, error) { return h.pass(ctx, true) }

// StepSweep runs the outbox sweep: rows past their deadline end with an alert; old rows are
// pruned. It returns the number of rows it ended.
func (h *Host) StepSweep(ctx context.Context) (int, error) { return h.sweep(ctx) }

// Relay is this host's relay link (package relaylink), for callers that drive its steps.
func (h *Host) Relay() *relaylink.Link { return h.relay }
