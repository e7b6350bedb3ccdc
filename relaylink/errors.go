package relaylink

import "github.com/agentmbx/agentmbx/api"

// The relay errors are api.CodedErrors: each names the control-socket code it is answered with
// and what a person can do about it. Match them with errors.Is.
var (
	// ErrInvalid is returned by Set for malformed input (a bad URL, key, CA or token file); the
	// message says which. It is api.ErrInvalid, the host's error for all bad input.
	ErrInvalid = api.ErrInvalid
	// ErrNoRelay is returned when an operation needs a pinned relay and none is set.
	ErrNoRelay = api.NewError(api.CodeNotFound, "no relay is set",
		"pin one with `agentmbx relay set URL [--key FINGERPRINT]`")
	// ErrRelayKeyMismatch is returned by Set when the relay serves a key other than the
	// fingerprint given with --key. Nothing is pinned.
	ErrRelayKeyMismatch = api.NewError(api.CodeConflict, "the relay serves another key than the one given",
		"check the fingerprint with the relay's operator (`agentmbx relay keygen` printed it); do not pin a key you cannot vouch for")
	// ErrRelayUnreachable is returned (wrapped) by Set when the relay does not answer its info,
	// or answers something that is not a v2 relay. Nothing is pinned.
	ErrRelayUnreachable = api.NewError(api.CodeUnavailable, "the relay did not answer as a v2 relay",
		"check the URL (https://host[:port]) and that `agentmbx relay serve` runs there")
	// ErrRelayStopped is returned while relay use is stopped because the relay served another key
	// than the pinned one: a new relay, or someone in between. `relay set` with the new key, after
	// checking it, resumes.
	ErrRelayStopped = api.NewError(api.CodeRefused, "relay use stopped: the relay serves another key than the pinned one",
		"if the relay really has a new key, check its fingerprint and confirm it with `agentmbx relay set URL --key FINGERPRINT`")

	// ErrRelayV1Only is returned by Set for a relay that answers 404 to /v2/relay/info (a v1
	// relay, AgentMBX 0.5.x before 0.5.5) unless the owner accepts it with AllowV1. Nothing is
	// pinned.
	ErrRelayV1Only = api.NewError(api.CodeRefused, "the relay speaks only the v1 API (AgentMBX 0.5.x before 0.5.5): it has no relay key, so nothing it answers is signed and it cannot be authenticated",
		"ask its operator for a v2 relay (agentmbx relay serve) and pin its key; to use this one anyway, knowingly: `agentmbx relay set URL --allow-v1`")
	// ErrRelayV1Key is returned by Set when --key names a key for a relay that speaks only v1:
	// a v1 relay has no key, so there is no identity to pin. Nothing is pinned.
	ErrRelayV1Key = api.NewError(api.CodeRefused, "the relay speaks only the v1 API: it has no relay key, so there is no identity to pin and --key cannot be checked",
		"to use it anyway, unauthenticated: `agentmbx relay set URL --allow-v1` (without --key)")

	// errCorrupt is returned when the relay record cannot be decoded (api.ErrCorrupt, as the
	// rest of the host's store).
	errCorrupt = api.ErrCorrupt
)
