package outbox

import (
	"context"
	"strconv"
)

// Sender sends due rows to one peer host over one transport (the LAN, or the pinned relay). The
// caller picks a Sender per row and records the outcomes; a Sender stores nothing.
type Sender interface {
	// Kind is the transport this Sender records on the rows it attempts.
	Kind() Transport
	// Send attempts rows, all for peer, and returns one outcome per row, in order.
	Send(ctx context.Context, peer Peer, rows []Row) []Outcome
}

// Peer is the host a Sender sends to.
type Peer struct {
	Host       string
	HostPubkey string
	Addr       string // its LAN address ("" when it has none)
	EncPub     string // its enc key as pinned ("" when unknown)
}

// OutcomeKind is what became of one attempt.
type OutcomeKind int

// Outcomes of an attempt.
const (
	// OutcomeDelivered: the peer stored the item (or had it already).
	OutcomeDelivered OutcomeKind = iota + 1
	// OutcomeFailed: no answer for the item (network, 5xx, 401, a missing result); retried
	// with backoff.
	OutcomeFailed
	// OutcomeRejected: the peer refused the item for good; the row ends rejected.
	OutcomeRejected
	// OutcomeRelayAccepted: the relay durably accepted the item (relay transport).
	OutcomeRelayAccepted
	// OutcomeRelaySentV1: a v1 relay said it stored the item, unsigned (MarkRelaySentV1):
	// Relay names it.
	OutcomeRelaySentV1
	// OutcomeLANUnsigned: the peer's LAN address answered that it stored the item, without a
	// valid LAN accept statement from the peer's pinned key (mbx.ValidLANAccept): no delivery.
	// BadStatement says a statement came and did not verify; without one the peer may be a host
	// that cannot sign (0.5.x) or something else at its address, which the host tells apart
	// (MarkLANUnsigned, or a failed attempt and an alert).
	OutcomeLANUnsigned
)

func (k OutcomeKind) String() string {
	switch k {
	case OutcomeDelivered:
		return "delivered"
	case OutcomeFailed:
		return "failed"
	case OutcomeRejected:
		return "rejected"
	case OutcomeRelayAccepted:
		return "relay-accepted"
	case OutcomeRelaySentV1:
		return "relay-sent-v1"
	case OutcomeLANUnsigned:
		return "lan-unsigned"
	}
	return "OutcomeKind(" + strconv.Itoa(int(k)) + ")"
}

// Outcome is the result of one row's attempt.
type Outcome struct {
	Kind OutcomeKind
	Err  error // why it failed or was rejected
	// Retryable marks a rejection that a later retry can get past (a relay quota or rate limit):
	// the row stays pending with backoff instead of ending rejected.
	Retryable bool
	// Acceptance and RelayKey (OutcomeRelayAccepted): the relay's signed accept statement and
	// the pinned relay key it verified against.
	Acceptance *Acceptance
	RelayKey   string
	// Relay is the URL of the v1 relay (OutcomeRelaySentV1).
	Relay string
	// BadStatement (OutcomeLANUnsigned): the answer carried a LAN accept statement that the
	// peer's pinned key did not make for this item.
	BadStatement bool
	// Unreachable marks a failure without any answer from the peer (no connection, no
	// response): its address is unreachable now.
	Unreachable bool
}

// Reason is the outcome's error text ("" without one), as a row records it.
func (o Outcome) Reason() string {
	if o.Err == nil {
		return ""
	}
	return o.Err.Error()
}

// FailedAll is n failed outcomes with err; unreachable marks them as having had no answer.
func FailedAll(n int, err error, unreachable bool) []Outcome {
	out := make([]Outcome, n)
	for i := range out {
		out[i] = Outcome{Kind: OutcomeFailed, Err: err, Unreachable: unreachable}
	}
	return out
}
