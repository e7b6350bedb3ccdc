package relaylink

import (
	"context"
	"errors"

	"github.com/agentmbx/agentmbx/checkpoint"
	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/relayclient"
)

// Source is a relay client as the Relay an checkpoint.Receiver pulls from: it passes the pull
// request on and reads the client's errors into the inbox errors the Receiver acts on.
type Source struct {
	Client *relayclient.Client
	// ObservePull and ObserveAck are told each pull's and each ack's error as the client
	// returned it (nil on success). Either may be nil.
	ObservePull func(ctx context.Context, err error)
	ObserveAck  func(err error)
}

var _ checkpoint.Relay = Source{}

// Pull asks the relay for the items after r.After.
func (s Source) Pull(ctx context.Context, r checkpoint.PullRequest) (mbx.PullResponse, error) {
	page, err := s.Client.Pull(ctx, relayclient.PullRequest(r))
	if s.ObservePull != nil {
		s.ObservePull(ctx, err)
	}
	return page, ReceiverError(err)
}

// Ack acks the relay through through in epoch.
func (s Source) Ack(ctx context.Context, epoch string, through int64) (mbx.AckResponse, error) {
	res, err := s.Client.Ack(ctx, epoch, through)
	if s.ObserveAck != nil {
		s.ObserveAck(err)
	}
	return res, ReceiverError(err)
}

// ReceiverError is a relay client's error as an checkpoint.Receiver reads it: an *checkpoint.RelayError
// whose Kind says what the relay answered (an epoch change with the relay's epoch, a rewind, a
// changed key, a missing or revoked enrolment), with the relay's Retry-After, still wrapping err as it is.
func ReceiverError(err error) error {
	if err == nil {
		return nil
	}
	re := &checkpoint.RelayError{Err: err}
	var ee *relayclient.EpochError
	switch {
	case errors.As(err, &ee):
		re.Kind, re.Epoch = checkpoint.ErrEpochChanged, ee.Epoch
	case errors.Is(err, relayclient.ErrRewound):
		re.Kind = checkpoint.ErrRewound
	case errors.Is(err, relayclient.ErrRelayKeyChanged):
		re.Kind = checkpoint.ErrKeyChanged
	case errors.Is(err, relayclient.ErrNotEnrolled), errors.Is(err, relayclient.ErrForbidden):
		// A 403 (revoked or denied) asks for an enrolment too: it is refused while the deny list
		// holds the host, and takes at once after the entry is removed.
		re.Kind = checkpoint.ErrNotEnrolled
	}
	var se *relayclient.StatusError
	if errors.As(err, &se) {
		re.RetryAfter = se.RetryAfter
	}
	return re
}
