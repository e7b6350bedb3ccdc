package relaylink

import (
	"context"

	"github.com/agentmbx/agentmbx/checkpoint"
)

// Steps of the daemon's relay loops, for a caller that drives them one at a time (the
// deterministic simulation, package sim, through Host.Relay).

// PullStep pulls one page from the pinned relay, processes it and acks it (checkpoint.Receiver.Step,
// without a long poll).
func (l *Link) PullStep(ctx context.Context) (checkpoint.StepResult, error) {
	c, err := l.Conn()
	if err != nil {
		return checkpoint.StepResult{}, err
	}
	r, err := l.Receiver(c, checkpoint.ReceiverOptions{})
	if err != nil {
		return checkpoint.StepResult{}, err
	}
	return r.Step(ctx)
}

// ReleaseHeld reprocesses the quarantined items whose sender is paired now, as the daemon's relay
// loop does when it starts.
func (l *Link) ReleaseHeld() { l.releaseAtStart() }
