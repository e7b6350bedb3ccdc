package host

// Errors of host cards (ParseCard, Card) and LAN pairing. They live here rather than in errors.go
// because cards and pairing are kept in their own files (card*.go, pair*.go).
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
