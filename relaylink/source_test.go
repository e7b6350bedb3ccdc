package relaylink

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/checkpoint"
	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/relayclient"
)

// TestReceiverErrors: the relay client's answers reach the receiver as the inbox errors it acts
// on (an epoch change with the relay's epoch, a rewind, a changed key, a missing or revoked
// enrolment, a Retry-After), and still match the client's own errors.
func TestReceiverErrors(t *testing.T) {
	for _, c := range []struct {
		name  string
		err   error
		kind  error
		epoch string
		retry time.Duration
	}{
		{"epoch", &relayclient.EpochError{Op: "pull", Epoch: "ep2"}, checkpoint.ErrEpochChanged, "ep2", 0},
		{"bad ack", &relayclient.StatusError{Op: "ack", Status: 400, Code: mbx.CodeBadAck}, checkpoint.ErrRewound, "", 0},
		{"key changed", &relayclient.KeyChangedError{URL: "https://relay.example"}, checkpoint.ErrKeyChanged, "", 0},
		{"not enrolled", &relayclient.StatusError{Op: "pull", Status: http.StatusUnauthorized}, checkpoint.ErrNotEnrolled, "", 0},
		{"revoked or denied", &relayclient.StatusError{Op: "pull", Status: http.StatusForbidden}, checkpoint.ErrNotEnrolled, "", 0},
		{"busy", &relayclient.StatusError{Op: "pull", Status: 429, RetryAfter: 30 * time.Second}, nil, "", 30 * time.Second},
	} {
		err := ReceiverError(c.err)
		var re *checkpoint.RelayError
		if !errors.As(err, &re) || re.Kind != c.kind || re.Epoch != c.epoch || re.RetryAfter != c.retry { //nolint:errorlint // fields compared, not errors
			t.Errorf("%s: ReceiverError = %#v, want kind %v, epoch %q, retry %s", c.name, err, c.kind, c.epoch, c.retry)
		}
		if !errors.Is(err, c.err) || err.Error() != c.err.Error() {
			t.Errorf("%s: %v does not wrap the client's error as it is", c.name, err)
		}
	}
	if ReceiverError(nil) != nil {
		t.Error("ReceiverError(nil) is not nil")
	}
}
