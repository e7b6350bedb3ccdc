package host

import (
	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/host/card"
	"github.com/agentmbx/agentmbx/relaylink"
)

// The host's errors are api.CodedErrors: each names the control-socket code it is answered with
// and what a person can do about it. Match them with errors.Is.
func newErr(code, msg, hint string) *api.CodedError { return api.NewError(code, msg, hint) }

// Errors of the host home and its store (Init, Open).
var (
	// ErrExists is returned by Init when the home already holds an identity (host.key).
	ErrExists = newErr(api.CodeConflict, "host identity already exists",
		"this home is initialized already; use another --home to create a second host")
	// ErrNotInitialized is returned by Open when the home has no identity or no store yet.
	ErrNotInitialized = newErr(api.CodeNotFound, "host home is not initialized",
		"run `agentmbx init --host NAME` first, or point --home / MBX_HOME at an existing home")
	// ErrLocked is returned (wrapped) by Open when another process, normally the daemon, holds
	// the store.
	ErrLocked = newErr(api.CodeUnavailable, "host store is locked by another process",
		"a daemon is probably running on this home; its control socket answers for it")
	// ErrSchema is returned by Open when the store was written by a newer binary.
	ErrSchema = newErr(api.CodeInternal, "host store schema is newer than this binary", "upgrade agentmbx")
	// ErrCorrupt is returned when a stored record cannot be decoded.
	ErrCorrupt = newErr(api.CodeInternal, "host store record is corrupt", "")
	// ErrClosed is returned by operations on a closed Host.
	ErrClosed = newErr(api.CodeUnavailable, "host is closed", "")
)

// Errors of bad input. Every one of them is returned before anything was stored.
var (
	// ErrInvalid is returned for malformed input: a bad agent or host name, address, kind,
	// an oversized subject or body, and the like. The message says which.
	// It is relaylink.ErrInvalid, so the relay commands' bad input matches it too.
	ErrInvalid = relaylink.ErrInvalid
	// ErrUnknownHost is returned by Send for an address name@host whose host is not a paired
	// peer (nothing is stored).
	ErrUnknownHost = newErr(api.CodeBadRequest, "unknown host (not a paired peer)",
		"list paired hosts with `agentmbx peers`; pair with `agentmbx pair` / `agentmbx join` or `agentmbx peers add CARD`")
	// ErrNoRecipients is returned by Send when the addresses match no local agent and no peer.
	ErrNoRecipients = newErr(api.CodeBadRequest, "no recipients",
		"address agents as name@host, name, role:ROLE, * or owner; `agentmbx agents` and `agentmbx peers` list who is there")
	// ErrReserved is returned when a reserved agent name (mbx) is used as a sender or registered.
	ErrReserved = newErr(api.CodeBadRequest, "reserved agent name", "")
	// ErrNotFound is returned when a message, agent or peer does not exist.
	ErrNotFound = newErr(api.CodeNotFound, "not found", "")
)

// Errors of the peers store.
var (
	// ErrPeerKeyMismatch is returned by PinPeer when a host of that name is pinned with another
	// key and the new record does not retire the old key explicitly (list it in RetiredKeys).
	// Remove the peer first to pin a new identity under its name.
	ErrPeerKeyMismatch = newErr(api.CodeConflict, "peer is pinned with another host key",
		"if the peer really has a new identity, `agentmbx peers remove HOST` and pair again")
	// ErrPeerKeyInUse is returned by PinPeer when the host key is already pinned under another
	// name.
	ErrPeerKeyInUse = newErr(api.CodeConflict, "host key is already pinned under another name", "")
	// ErrSelf is returned by PinPeer for this host's own name or key.
	ErrSelf = newErr(api.CodeBadRequest, "cannot pin this host as its own peer", "")
)

// Errors of the LAN and receive paths.
var (
	// ErrUnpaired is returned when a request or item comes from a host that is not pinned.
	ErrUnpaired = newErr(api.CodeNotFound, "host is not paired", "")
	// ErrTooLarge is returned for a request body over the cap.
	ErrTooLarge = newErr(api.CodeTooLarge, "request too large", "")
	// ErrPeerStatus is returned (wrapped) when a peer answers a LAN request with an unexpected
	// HTTP status.
	ErrPeerStatus = newErr(api.CodeUnavailable, "unexpected status from peer", "")
)

// Errors of the relay (RelaySet, RelayStatus and the relay transport): package relaylink's.
var (
	// ErrNoRelay is returned when an operation needs a pinned relay and none is set.
	ErrNoRelay = relaylink.ErrNoRelay
	// ErrRelayKeyMismatch is returned by RelaySet when the relay serves a key other than the
	// fingerprint given with --key. Nothing is pinned.
	ErrRelayKeyMismatch = relaylink.ErrRelayKeyMismatch
	// ErrRelayUnreachable is returned (wrapped) by RelaySet when the relay does not answer as a
	// v2 relay. Nothing is pinned.
	ErrRelayUnreachable = relaylink.ErrRelayUnreachable
	// ErrRelayStopped is returned while relay use is stopped because the relay served another key
	// than the pinned one, until the owner confirms the new key with RelaySet.
	ErrRelayStopped = relaylink.ErrRelayStopped
)

// Errors of host cards (ParseCard): package host/card's.
var (
	// ErrCardMalformed is returned by ParseCard for input that is not a v1 host card.
	ErrCardMalformed = card.ErrMalformed
	// ErrCardSignature is returned by ParseCard when the card's host key did not sign the card.
	ErrCardSignature = card.ErrSignature
	// ErrCardFuture is returned by ParseCard for a card made more than CardSkew after now.
	ErrCardFuture = card.ErrFuture
)
