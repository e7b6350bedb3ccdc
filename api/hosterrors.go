package api

// The errors a host answers with, beside the generic sentinels of errors.go. Each is a
// CodedError: it names the control-socket code it is answered with and what a person can do
// about it. Package host and the packages split out of it return (or wrap) them; the command
// line matches them with errors.Is. Across the socket a client sees their code, message and hint.

// Errors of the host home and its store (init, open).
var (
	// ErrHostExists: init found an identity (host.key) in the home already.
	ErrHostExists = NewError(CodeConflict, "host identity already exists",
		"this home is initialized already; use another --home to create a second host")
	// ErrNotInitialized: the home has no identity or no store yet.
	ErrNotInitialized = NewError(CodeNotFound, "host home is not initialized",
		"run `agentmbx init --host NAME` first, or point --home / MBX_HOME at an existing home")
	// ErrLocked (wrapped): another process, normally the daemon, holds the store.
	ErrLocked = NewError(CodeUnavailable, "host store is locked by another process",
		"a daemon is probably running on this home; its control socket answers for it")
	// ErrSchema: the store was written by a newer binary.
	ErrSchema = NewError(CodeInternal, "host store schema is newer than this binary", "upgrade agentmbx")
	// ErrCorrupt: a stored record cannot be decoded.
	ErrCorrupt = NewError(CodeInternal, "host store record is corrupt", "")
	// ErrClosed: an operation on a closed host.
	ErrClosed = NewError(CodeUnavailable, "host is closed", "")
)

// Errors of bad input. Every one of them is returned before anything was stored.
var (
	// ErrInvalid: malformed input (a bad agent or host name, address, kind, an oversized subject
	// or body, a bad relay URL, and the like). The message says which.
	ErrInvalid = NewError(CodeBadRequest, "invalid input", "")
	// ErrUnknownHost: a send to name@host whose host is not a paired peer (nothing is stored).
	ErrUnknownHost = NewError(CodeBadRequest, "unknown host (not a paired peer)",
		"list paired hosts with `agentmbx peers`; pair with `agentmbx pair` / `agentmbx join` or `agentmbx peers add CARD`")
	// ErrNoRecipients: a send whose addresses match no local agent and no peer.
	ErrNoRecipients = NewError(CodeBadRequest, "no recipients",
		"address agents as name@host, name, role:ROLE, * or owner; `agentmbx agents` and `agentmbx peers` list who is there")
	// ErrReserved: a reserved agent name (mbx) used as a sender or registered.
	ErrReserved = NewError(CodeBadRequest, "reserved agent name", "")
)

// Errors of the peers store and of the hosts that talk to this one.
var (
	// ErrPeerKeyMismatch: a host of that name is pinned with another key and the new record does
	// not retire the old key explicitly. Remove the peer first to pin a new identity under its
	// name.
	ErrPeerKeyMismatch = NewError(CodeConflict, "peer is pinned with another host key",
		"if the peer really has a new identity, `agentmbx peers remove HOST` and pair again")
	// ErrPeerKeyInUse: the host key is already pinned under another name.
	ErrPeerKeyInUse = NewError(CodeConflict, "host key is already pinned under another name", "")
	// ErrSelf: this host's own name or key given as a peer.
	ErrSelf = NewError(CodeBadRequest, "cannot pin this host as its own peer", "")
	// ErrUnpaired: a request or item comes from a host that is not pinned.
	ErrUnpaired = NewError(CodeNotFound, "host is not paired", "")
)
