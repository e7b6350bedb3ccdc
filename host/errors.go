package host

// Error is a sentinel error of this package. Code is the stable word the control socket answers
// with (the client package's codes: bad_request, not_found, conflict, refused, unavailable, …)
// and Hint what a person can do about it. Match with errors.Is against the sentinels below.
type Error struct {
	msg  string
	code string
	hint string
}

func newErr(code, msg, hint string) *Error { return &Error{msg: msg, code: code, hint: hint} }

func (e *Error) Error() string { return e.msg }

// Code is the control-socket error code of the error.
func (e *Error) Code() string { return e.code }

// Hint says what to do about the error ("" when there is nothing to add).
func (e *Error) Hint() string { return e.hint }

// Errors of the host home and its store (Init, Open).
var (
	// ErrExists is returned by Init when the home already holds an identity (host.key).
	ErrExists = newErr("conflict", "host identity already exists",
		"this home is initialized already; use another --home to create a second host")
	// ErrNotInitialized is returned by Open when the home has no identity or no store yet.
	ErrNotInitialized = newErr("not_found", "host home is not initialized",
		"run `agentmbx init --host NAME` first, or point --home / MBX_HOME at an existing home")
	// ErrLocked is returned (wrapped) by Open when another process, normally the daemon, holds
	// the store.
	ErrLocked = newErr("unavailable", "host store is locked by another process",
		"a daemon is probably running on this home; its control socket answers for it")
	// ErrSchema is returned by Open when the store was written by a newer binary.
	ErrSchema = newErr("internal", "host store schema is newer than this binary", "upgrade agentmbx")
	// ErrCorrupt is returned when a stored record cannot be decoded.
	ErrCorrupt = newErr("internal", "host store record is corrupt", "")
	// ErrClosed is returned by operations on a closed Host.
	ErrClosed = newErr("unavailable", "host is closed", "")
)

// Errors of bad input. Every one of them is returned before anything was stored.
var (
	// ErrInvalid is returned for malformed input: a bad agent or host name, address, kind,
	// an oversized subject or body, and the like. The message says which.
	ErrInvalid = newErr("bad_request", "invalid input", "")
	// ErrUnknownHost is returned by Send for an address name@host whose host is not a paired
	// peer (nothing is stored).
	ErrUnknownHost = newErr("bad_request", "unknown host (not a paired peer)",
		"list paired hosts with `agentmbx peers`; pair with `agentmbx pair` / `agentmbx join` or `agentmbx peers add CARD`")
	// ErrNoRecipients is returned by Send when the addresses match no local agent and no peer.
	ErrNoRecipients = newErr("bad_request", "no recipients",
		"address agents as name@host, name, role:ROLE, * or owner; `agentmbx agents` and `agentmbx peers` list who is there")
	// ErrReserved is returned when a reserved agent name (mbx) is used as a sender or registered.
	ErrReserved = newErr("bad_request", "reserved agent name", "")
	// ErrNotFound is returned when a message, agent or peer does not exist.
	ErrNotFound = newErr("not_found", "not found", "")
)

// Errors of the peers store.
var (
	// ErrPeerKeyMismatch is returned by PinPeer when a host of that name is pinned with another
	// key and the new record does not retire the old key explicitly (list it in RetiredKeys).
	// Remove the peer first to pin a new identity under its name.
	ErrPeerKeyMismatch = newErr("conflict", "peer is pinned with another host key",
		"if the peer really has a new identity, `agentmbx peers remove HOST` and pair again")
	// ErrPeerKeyInUse is returned by PinPeer when the host key is already pinned under another
	// name.
	ErrPeerKeyInUse = newErr("conflict", "host key is already pinned under another name", "")
	// ErrSelf is returned by PinPeer for this host's own name or key.
	ErrSelf = newErr("bad_request", "cannot pin this host as its own peer", "")
)

// Errors of the LAN and receive paths.
var (
	// ErrUnpaired is returned when a request or item comes from a host that is not pinned.
	ErrUnpaired = newErr("not_found", "host is not paired", "")
	// ErrTooLarge is returned for a request body over the cap.
	ErrTooLarge = newErr("too_large", "request too large", "")
	// ErrPeerStatus is returned (wrapped) when a peer answers a LAN request with an unexpected
	// HTTP status.
	ErrPeerStatus = newErr("unavailable", "unexpected status from peer", "")
)

// Errors of the relay (RelaySet, RelayStatus and the relay transport).
var (
	// ErrNoRelay is returned when an operation needs a pinned relay and none is set.
	ErrNoRelay = newErr("not_found", "no relay is set",
		"pin one with `agentmbx relay set URL [--key FINGERPRINT]`")
	// ErrRelayKeyMismatch is returned by RelaySet when the relay serves a key other than the
	// fingerprint given with --key. Nothing is pinned.
	ErrRelayKeyMismatch = newErr("conflict", "the relay serves another key than the one given",
		"check the fingerprint with the relay's operator (`agentmbx relay keygen` printed it); do not pin a key you cannot vouch for")
	// ErrRelayUnreachable is returned (wrapped) by RelaySet when the relay does not answer its
	// info, or answers something that is not a v2 relay. Nothing is pinned.
	ErrRelayUnreachable = newErr("unavailable", "the relay did not answer as a v2 relay",
		"check the URL (https://host[:port]) and that `agentmbx relay serve` runs there")
	// ErrRelayStopped is returned while relay use is stopped because the relay served another key
	// than the pinned one: a new relay, or someone in between. `relay set` with the new key, after
	// checking it, resumes.
	ErrRelayStopped = newErr("refused", "relay use stopped: the relay serves another key than the pinned one",
		"if the relay really has a new key, check its fingerprint and confirm it with `agentmbx relay set URL --key FINGERPRINT`")
)

// Errors of host cards (ParseCard, Card).
var (
	// ErrCardMalformed is returned by ParseCard for input that is not a v1 host card: not JSON,
	// too large, unknown or missing fields, a bad host name, key, address or time. The message
	// says which.
	ErrCardMalformed = newErr("bad_request", "malformed host card",
		"a card is the JSON that `agentmbx id --card` prints on the other host, unchanged")
	// ErrCardSignature is returned by ParseCard when the card's host key did not sign the card
	// as received.
	ErrCardSignature = newErr("refused", "host card signature does not verify",
		"the card was changed after it was made; ask for a fresh `agentmbx id --card`")
	// ErrCardFuture is returned by ParseCard for a card made more than CardSkew after now (a
	// clock far off on one side, or a forged time).
	ErrCardFuture = newErr("refused", "host card is dated in the future",
		"check the clocks of both hosts")
)

// Errors of LAN pairing. When any of them is returned nothing was pinned by that call.
var (
	// ErrPairBusy is returned by StartPairing and JoinPairing while another pairing session of
	// this host is open (waiting for a joiner or for confirmation).
	ErrPairBusy = newErr("conflict", "another pairing session is open",
		"finish or cancel it first, or wait until it expires")
	// ErrNoPairing is returned when there is no pairing session: none started, or (from the
	// other host) none open there.
	ErrNoPairing = newErr("not_found", "no pairing session",
		"run `agentmbx pair` on the inviting host first and use the address and token it prints")
	// ErrPairExpired is returned when the pairing token or the confirmation window expired.
	ErrPairExpired = newErr("refused", "pairing token expired", "start a new `agentmbx pair`")
	// ErrPairToken is returned when the token is wrong (the join or accept MAC does not verify)
	// or malformed. After MaxPairAttempts wrong MACs the token is burned (ErrPairBurned).
	ErrPairToken = newErr("refused", "wrong pairing token",
		"type the token exactly as `agentmbx pair` printed it (XXXX-XXXX-XXXX)")
	// ErrPairBurned is returned once a token has seen MaxPairAttempts wrong MACs.
	ErrPairBurned = newErr("refused", "pairing token burned after too many wrong attempts",
		"start a new `agentmbx pair`")
	// ErrPairDeclined is returned when this side's or the other side's user declined the code.
	ErrPairDeclined = newErr("refused", "pairing declined", "")
	// ErrPairCancelled is returned when a session was cancelled (CancelPairing, or the command
	// driving it went away) before it completed.
	ErrPairCancelled = newErr("refused", "pairing cancelled", "")
	// ErrPairState is returned for a step out of order: a second join, a confirmation before
	// the join or with another answer than before.
	ErrPairState = newErr("conflict", "pairing step out of order", "")
	// ErrPairProtocol is returned for a malformed pairing message or answer, an enc-key ad that
	// fails its checks, or an accept that does not verify.
	ErrPairProtocol = newErr("bad_request", "bad pairing message", "")
	// ErrPairConflict is returned when the other host names this host itself, or a name or key
	// pinned already with another key or name.
	ErrPairConflict = newErr("conflict", "pairing conflicts with a pinned peer",
		"`agentmbx peers` shows what is pinned; `agentmbx peers remove HOST` to replace it")
)
