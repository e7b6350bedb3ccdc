package host

import (
	"context"

	"github.com/agentmbx/agentmbx/relaylink"
)

// Steps: what the daemon's loops run, one step at a time on the caller's goroutine. The
// deterministic simulation (package sim) drives hosts through these instead of RunDaemon: the
// outbox steps here (Steps), the relay steps on the host's relay link (Relay: Keep, PullStep,
// ReleaseHeld). With Options.Serial and Options.RelayClient every effect of a step happens on
// the calling goroutine, in an order the caller controls.

// Steps are the outbox loop's steps of a host (the relay's are on its link: Relay).
type Steps struct{ h *Host }

// Steps returns the host's outbox steps.
func (h *Host) Steps() Steps { return Steps{h} }

// Outbox runs one outbox pass (as the outbox loop does at each tick) and returns when every send
// it started is recorded. It returns the number of rows it started sending.
func (s Steps) Outbox(ctx context.Context) (int, error) { return s.h.pass(ctx, true) }

// Sweep runs the outbox sweep: rows past their deadline end with an alert; old rows are pruned.
// It returns the number of rows it ended.
func (s Steps) Sweep(ctx context.Context) (int, error) { return s.h.sweep(ctx) }

// Relay is this host's relay link (package relaylink), for callers that drive its steps.
func (h *Host) Relay() *relaylink.Link { return h.relay }
