package api

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// PairingService runs LAN pairing sessions: the pairing package implements it on a host's store,
// the client over a daemon's control socket. One session (of either role) at a time per host.
type PairingService interface {
	// StartPairing opens a session as the inviter and returns its one-time token (ttl 0: the
	// default lifetime). ErrPairBusy while another session is open.
	StartPairing(ctx context.Context, ttl time.Duration) (string, error)
	// PairingStatus is the state of the current or last session (PairNone when there was none).
	PairingStatus(ctx context.Context) (PairingState, error)
	// WaitPairing waits until the session's state is other than from and returns it; when ctx
	// ends first it returns the current state and ctx's error.
	WaitPairing(ctx context.Context, from PairState) (PairingState, error)
	// JoinPairing joins the inviter at addr with token and returns the state with the code.
	JoinPairing(ctx context.Context, addr, token string) (PairingState, error)
	// ConfirmPairing gives this side's answer to the code and waits for the other side's: it
	// returns the pinned peer when both accepted.
	ConfirmPairing(ctx context.Context, accept bool) (Peer, error)
	// CancelPairing ends the open session without pinning.
	CancelPairing(ctx context.Context) error
}

// CardIssuer signs this host's card naming addr as its LAN address ("" for the address the
// daemon listens on, when it has one).
type CardIssuer interface {
	Card(ctx context.Context, addr string) ([]byte, error)
}

// PairState is the state of a pairing session.
type PairState int

// Pairing session states. Done, Declined, Expired and Failed are final.
const (
	PairNone      PairState = iota // no session
	PairWaiting                    // inviter: the token is out, waiting for a joiner
	PairJoining                    // joiner: talking to the inviter
	PairCode                       // the code is ready: the user compares and confirms
	PairConfirmed                  // this side's user accepted; waiting for the other side
	PairDone                       // the peer is pinned
	PairDeclined                   // a user declined the code
	PairExpired                    // the token or the confirmation window expired
	PairFailed                     // burned token, cancelled, conflict or protocol error
)

var pairStateNames = [...]string{"none", "waiting", "joining", "code", "confirmed", "done", "declined", "expired", "failed"}

func (s PairState) String() string {
	if s < 0 || int(s) >= len(pairStateNames) {
		return fmt.Sprintf("PairState(%d)", int(s))
	}
	return pairStateNames[s]
}

// Final reports whether the session is over (done, declined, expired or failed).
func (s PairState) Final() bool { return s >= PairDone }

// MarshalText writes the state's name.
func (s PairState) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText reads a state's name.
func (s *PairState) UnmarshalText(b []byte) error {
	for i, n := range pairStateNames {
		if n == string(b) {
			*s = PairState(i)
			return nil
		}
	}
	return fmt.Errorf("%w: pairing state %q", ErrBadRequest, b)
}

// PairRole says which side of a pairing this host is.
type PairRole int

// Pairing roles.
const (
	PairInviter PairRole = iota + 1 // made the token (agentmbx pair)
	PairJoiner                      // used it (agentmbx join)
)

func (r PairRole) String() string {
	switch r {
	case PairInviter:
		return "inviter"
	case PairJoiner:
		return "joiner"
	case 0:
		return ""
	}
	return fmt.Sprintf("PairRole(%d)", int(r))
}

// MarshalText writes the role's name.
func (r PairRole) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// UnmarshalText reads a role's name.
func (r *PairRole) UnmarshalText(b []byte) error {
	switch string(b) {
	case "inviter":
		*r = PairInviter
	case "joiner":
		*r = PairJoiner
	case "":
		*r = 0
	default:
		return fmt.Errorf("%w: pairing role %q", ErrBadRequest, b)
	}
	return nil
}

// PairingState is what PairingStatus shows of the current (or last) pairing session.
type PairingState struct {
	State PairState `json:"state"`
	Role  PairRole  `json:"role,omitempty"`
	// Code is the 6-digit code both users compare (states code, confirmed, done).
	Code string `json:"code,omitempty"`
	// Peer is the other host, once it is known (from the join on).
	Peer *Peer `json:"peer,omitempty"`
	// ExpiresAt is when the token (waiting) or the confirmation window ends (ISO-8601).
	ExpiresAt string `json:"expires_at,omitempty"`
	// AttemptsLeft is how many wrong MACs the token still takes (inviter, waiting).
	AttemptsLeft int `json:"attempts_left,omitempty"`
	// Error says why a session ended without a pin; Reason is its stable word (PairReason).
	Error  string `json:"error,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// Err is the sentinel error of a session that ended without a pin (matched by Reason), or nil.
func (st PairingState) Err() error {
	if st.Reason == "" && st.Error == "" {
		return nil
	}
	for _, r := range pairReasons {
		if r.reason == st.Reason {
			if st.Error != "" && st.Error != r.err.Error() {
				return fmt.Errorf("%w: %s", r.err, strings.TrimPrefix(st.Error, r.err.Error()+": "))
			}
			return r.err
		}
	}
	return errors.New(st.Error)
}

// Errors of LAN pairing. When any of them is returned nothing was pinned by that call.
var (
	// ErrPairBusy: another pairing session of this host is open.
	ErrPairBusy = NewError(CodeConflict, "another pairing session is open",
		"finish or cancel it first, or wait until it expires")
	// ErrNoPairing: there is no pairing session (none started here, or none open at the inviter).
	ErrNoPairing = NewError(CodeNotFound, "no pairing session",
		"run `agentmbx pair` on the inviting host first and use the address and token it prints")
	// ErrPairExpired: the pairing token or the confirmation window expired.
	ErrPairExpired = NewError(CodeRefused, "pairing token expired", "start a new `agentmbx pair`")
	// ErrPairToken: the token is wrong (a MAC does not verify) or malformed.
	ErrPairToken = NewError(CodeRefused, "wrong pairing token",
		"type the token exactly as `agentmbx pair` printed it (XXXX-XXXX-XXXX)")
	// ErrPairBurned: the token has seen too many wrong MACs.
	ErrPairBurned = NewError(CodeRefused, "pairing token burned after too many wrong attempts",
		"start a new `agentmbx pair`")
	// ErrPairDeclined: this side's or the other side's user declined the code.
	ErrPairDeclined = NewError(CodeRefused, "pairing declined", "")
	// ErrPairCancelled: the session was cancelled before it completed.
	ErrPairCancelled = NewError(CodeRefused, "pairing cancelled", "")
	// ErrPairState: a step out of order (a second join, a confirmation before the join or with
	// another answer than before).
	ErrPairState = NewError(CodeConflict, "pairing step out of order", "")
	// ErrPairProtocol: a malformed pairing message or answer, an enc-key ad that fails its
	// checks, or an accept that does not verify.
	ErrPairProtocol = NewError(CodeBadRequest, "bad pairing message", "")
	// ErrPairConflict: the other host names this host itself, or a name or key pinned already
	// with another key or name.
	ErrPairConflict = NewError(CodeConflict, "pairing conflicts with a pinned peer",
		"`agentmbx peers` shows what is pinned; `agentmbx peers remove HOST` to replace it")
)

// pairReasons are the stable words of the pairing errors, in PairingState.Reason and on the
// pairing wire between hosts.
var pairReasons = []struct {
	err    error
	reason string
}{
	{ErrNoPairing, "no_pairing"},
	{ErrPairExpired, "expired"},
	{ErrPairBurned, "burned"},
	{ErrPairDeclined, "declined"},
	{ErrPairCancelled, "cancelled"},
	{ErrPairToken, "bad_token"},
	{ErrPairConflict, "conflict"},
	{ErrPairState, "state"},
	{ErrPairProtocol, "bad_request"},
}

// PairReason is the stable word of a pairing error ("internal" for any other error).
func PairReason(err error) string {
	for _, r := range pairReasons {
		if errors.Is(err, r.err) {
			return r.reason
		}
	}
	return "internal"
}

// PairReasonErr is the pairing error of a stable word, or nil for a word it does not know.
func PairReasonErr(reason string) error {
	for _, r := range pairReasons {
		if r.reason == reason {
			return r.err
		}
	}
	return nil
}

// Request and answer bodies of the pairing routes of the control socket.
type (
	// PairStartRequest opens a session as the inviter; TTL is a Go duration ("" for the default).
	PairStartRequest struct {
		TTL string `json:"ttl,omitempty"`
	}
	// PairStartAnswer carries the one-time token.
	PairStartAnswer struct {
		Token string `json:"token"`
	}
	// PairJoinRequest joins the inviter at Addr with Token.
	PairJoinRequest struct {
		Addr  string `json:"addr"`
		Token string `json:"token"`
	}
	// PairConfirmRequest is this side's answer to the code (required).
	PairConfirmRequest struct {
		Accept *bool `json:"accept"`
	}
)

// DefaultPairWait is how long GET /v1/pair/wait holds a request without a timeout parameter;
// MaxPairWait is the longest it accepts.
const (
	DefaultPairWait = 30 * time.Second
	MaxPairWait     = 10 * time.Minute
)
