package rotation

import "github.com/agentmbx/agentmbx/api"

// Errors of a rotation. They are api.CodedErrors: match them with errors.Is.
var (
	// ErrInProgress is returned by Prepare while an earlier rotation is not done.
	ErrInProgress = api.NewError(api.CodeConflict, "a host key rotation is in progress",
		"start the daemon to finish it (`agentmbx id` shows its progress)")
	// ErrRelayRotating is what Hold answers while the rotation's relay steps are not done.
	ErrRelayRotating = api.NewError(api.CodeUnavailable, "the relay link waits for the host key rotation",
		"the daemon finishes the rotation at the relay; `agentmbx id` shows its progress")
	// ErrRefused is returned (wrapped, with the reason) for a peer's rotation that does not
	// verify against the pinned key or is otherwise not one to apply. Nothing changed.
	ErrRefused = api.NewError(api.CodeRefused, "host key rotation refused",
		"the record must start from the key this host pinned for the peer and carry both signatures")
	// ErrCorrupt is returned when the stored rotation or a key file of the home cannot be read
	// as what it should be. It is api.ErrCorrupt, the host store's.
	ErrCorrupt = api.ErrCorrupt
)

// Failpoints of a rotation (crash tests).
const (
	FailPrepared     = "host.rotate.prepared"      // record stored, keys not swapped
	FailEncSwapped   = "host.rotate.enc-swapped"   // enc.key replaced, host.key not yet
	FailSwapped      = "host.rotate.swapped"       // both keys swapped and recorded
	FailNoticed      = "host.rotate.noticed"       // relay notices accepted and recorded
	FailRelayRotated = "host.rotate.relay-rotated" // the relay answered the rotate, not recorded
	FailReset        = "host.rotate.reset"         // receive position reset and recorded
	FailLANSent      = "host.rotate.lan-sent"      // a peer took the LAN record, not recorded
)
