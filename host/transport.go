package host

import (
	"time"

	"github.com/agentmbx/agentmbx/host/reach"
	"github.com/agentmbx/agentmbx/outbox"
	"github.com/agentmbx/agentmbx/relaylink"
)

// Choosing a transport (docs/design.md: Push and acceptance, Delivery receipts, Choosing a
// transport).
//
// Transport selection, per row (transportFor): a relay-accepted row (flagged for a re-push after
// an epoch change) goes to the relay only, never the LAN. A pending row goes to the LAN unless a
// relay is usable and one of these holds: the peer has no known LAN address; the peer's LAN
// address failed to answer within the last lanRetryAfter (new rows then skip a LAN that is down,
// and try it again after that, so they go over the LAN again once the peer is reachable there; a
// peer that answers, even with an error, is reachable); or the row's LAN attempts failed at least
// twice (relayAfterLANFailures) and its last attempt was over the LAN. A row the relay did not
// take (a refusal such as a target that is not enrolled there, or no valid answer) tries the LAN
// again next, so a row never waits on a relay that cannot deliver it while the LAN could: the two
// alternate while both fail. Rows are only ever taken when due, so the relay pass respects
// next_at like the LAN pass.
//
// A push sends the wire bytes persisted with the row, exactly, on every attempt. A row moves to
// relay-accepted only on an accept statement that verifies — by the pinned relay key, for this
// sender, the row's item id, the row's target key and the hash of the row's wire bytes — and that
// check is repeated inside the transaction that records the move (record). Anything else leaves
// the row pending: a 200 without a valid statement, a missing result, a lost answer. Rejections
// are kept with their reason: retried with backoff where retrying can help (quotas, a target
// not yet enrolled or not yet allowing this sender), ended with an alert where it cannot. A
// rejected:rate, a 429 and a 503 with Retry-After pause the whole link instead (relaylink/pause.go).

// Failpoints of the relay paths (see package failpoint; MBX_FAILPOINT in crash tests).
const (
	// FailRelayAfterPushBeforeRecord fires after a push answered and before its outcomes are
	// recorded in the outbox.
	FailRelayAfterPushBeforeRecord = relaylink.FailAfterPushBeforeRecord
	// FailRelayHandledBeforeCommit fires inside the transaction of a relay page, after an
	// envelope was handled and before the page (mail and checkpoint) commits.
	FailRelayHandledBeforeCommit = "host.relay.handled-before-commit"
)

const (
	// relayAfterLANFailures is how many failed LAN attempts move a row to the relay.
	relayAfterLANFailures = 2
	// lanRetryAfter is how long new rows skip a peer whose LAN address did not answer, counted
	// from the last attempt or probe that got no answer (the daemon probes it every 5 s, so
	// the mark stays while the peer is away and ends when a probe gets an answer).
	lanRetryAfter = time.Minute
)

// transportFor picks the transport of a due row for peer (see the comment above); relayOK says
// whether a relay is usable now.
func (h *Host) transportFor(r outbox.Row, p PeerRecord, relayOK bool, now time.Time) outbox.Transport {
	if r.State == outbox.StateRelayAccepted {
		return outbox.TransportRelay
	}
	if !relayOK {
		return outbox.TransportLAN
	}
	if p.Addr == "" || h.reach.DownWithin(reach.LAN(p.Host), lanRetryAfter) {
		return outbox.TransportRelay
	}
	if r.LANFailures >= relayAfterLANFailures && r.Transport != outbox.TransportRelay {
		return outbox.TransportRelay
	}
	// A pending row whose last attempt went to the relay was not taken there (no answer, no
	// valid statement, a refusal such as a target that never enrolled): the LAN may answer now.
	return outbox.TransportLAN
}
