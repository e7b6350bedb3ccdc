package host

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/agentmbx/agentmbx/internal/failpoint"
	"github.com/agentmbx/agentmbx/internal/logkey"
	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/outbox"
	"github.com/agentmbx/agentmbx/relayclient"
)

// Sending through the relay (docs/design.md: Push and acceptance, Delivery receipts, Choosing a
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
// are kept with their reason: retried with backoff where retrying can help (quotas, rate, a target
// not yet enrolled or not yet allowing this sender), ended with an alert where it cannot.

// Failpoints of the relay paths (see package failpoint; MBX_FAILPOINT in crash tests).
const (
	// FailRelayAfterPushBeforeRecord fires after a push answered and before its outcomes are
	// recorded in the outbox.
	FailRelayAfterPushBeforeRecord = "host.relay.after-push-before-record"
	// FailRelayHandledBeforeCommit fires inside the transaction of a relay page, after an
	// envelope was handled and before the page (mail and checkpoint) commits.
	FailRelayHandledBeforeCommit = "host.relay.handled-before-commit"
)

const (
	// relayAfterLANFailures is how many failed LAN attempts move a row to the relay.
	relayAfterLANFailures = 2
	// lanRetryAfter is how long new rows skip a peer whose LAN address did not answer.
	lanRetryAfter = time.Minute
	// relayPushBytes bounds the wire bytes of one push (the relay caps bodies at 8 MiB; base64
	// adds a third).
	relayPushBytes = 5 << 20
)

// retryableRejections are the relay's rejection codes (after "rejected:") where a later retry of
// the same bytes can succeed.
var retryableRejections = []string{"quota:", "rate", "target not enrolled", "sender not accepted by target"}

func retryableRejection(code string) bool {
	for _, p := range retryableRejections {
		if code == p || (strings.HasSuffix(p, ":") && strings.HasPrefix(code, p)) {
			return true
		}
	}
	return false
}

// transportFor picks the transport of a due row for peer (see the comment above); relayOK says
// whether a relay is usable now.
func (h *Host) transportFor(r outbox.Row, p PeerRecord, relayOK bool, now time.Time) outbox.Transport {
	if r.State == outbox.StateRelayAccepted {
		return outbox.TransportRelay
	}
	if !relayOK {
		return outbox.TransportLAN
	}
	if p.Addr == "" || h.lanDownSince(p.Host, now) {
		return outbox.TransportRelay
	}
	if r.LANFailures >= relayAfterLANFailures && r.Transport != outbox.TransportRelay {
		return outbox.TransportRelay
	}
	// A pending row whose last attempt went to the relay was not taken there (no answer, no
	// valid statement, a refusal such as a target that never enrolled): the LAN may answer now.
	return outbox.TransportLAN
}

// lanDownSince reports whether the peer's LAN address failed to answer less than lanRetryAfter
// before now.
func (h *Host) lanDownSince(host string, now time.Time) bool {
	h.rl.mu.Lock()
	defer h.rl.mu.Unlock()
	at, ok := h.rl.lanDown[host]
	return ok && now.Sub(at) < lanRetryAfter
}

// noteLAN records what a LAN attempt showed of the peer's reachability: any answer (even an
// error status) clears the mark, no answer at all sets it.
func (h *Host) noteLAN(host string, out []outbox.Outcome) {
	answered := false
	for _, o := range out {
		if !o.Unreachable {
			answered = true
		}
	}
	h.rl.mu.Lock()
	defer h.rl.mu.Unlock()
	if answered {
		delete(h.rl.lanDown, host)
	} else if len(out) > 0 {
		h.rl.lanDown[host] = h.clock()
	}
}

// lanUp clears the peer's down mark: a verified request came from it over the LAN.
func (h *Host) lanUp(host string) {
	h.rl.mu.Lock()
	delete(h.rl.lanDown, host)
	h.rl.mu.Unlock()
}

// relayTransport pushes rows to the pinned relay; it is an outbox.Sender.
type relayTransport struct {
	h *Host
	l *relayLink
}

func (t *relayTransport) Kind() outbox.Transport { return outbox.TransportRelay }

// Send pushes rows (all for peer, addressed by each row's pinned host key) in batches that fit
// the relay's max_batch and body cap, and returns one outcome per row.
func (t *relayTransport) Send(ctx context.Context, _ outbox.Peer, rows []outbox.Row) []outbox.Outcome {
	h := t.h
	lim := mbx.DefaultLimits()
	if s, err := h.loadRelay(); err == nil && s != nil {
		lim = s.limits()
	}
	maxBatch := max(1, min(lim.MaxBatch, mbx.DefaultMaxBatch))
	out := make([]outbox.Outcome, len(rows))
	for start := 0; start < len(rows); {
		n, size := 0, 0
		for start+n < len(rows) && n < maxBatch && (n == 0 || size+len(rows[start+n].Wire) <= relayPushBytes) {
			size += len(rows[start+n].Wire)
			n++
		}
		copy(out[start:start+n], t.push(ctx, rows[start:start+n], lim))
		start += n
	}
	return out
}

// push sends one batch.
func (t *relayTransport) push(ctx context.Context, rows []outbox.Row, lim mbx.Limits) []outbox.Outcome {
	h, l := t.h, t.l
	items := make([]relayclient.PushItem, len(rows))
	for i, r := range rows {
		kind := mbx.ItemKindEnvelope
		if r.Kind == outbox.KindReceipt {
			kind = mbx.ItemKindReceipt
		}
		items[i] = relayclient.PushItem{Kind: kind, ItemID: r.ItemID,
			Targets: []relayclient.PushTarget{{HostPubkey: r.HostKey, Wire: r.Wire}}}
	}
	res, err := l.c.Push(ctx, items)
	if err != nil {
		h.relayFailed(l, opPush, err)
		return outbox.FailedAll(len(rows), fmt.Errorf("relay push: %w", err), false)
	}
	h.relayProblem(l, opPush, nil)
	// Crash drill: the relay committed the push, the host has not recorded its answer.
	_ = failpoint.Inject(FailRelayAfterPushBeforeRecord)
	out := make([]outbox.Outcome, len(rows))
	epochs := map[string]bool{}
	for i, r := range rows {
		tr := res[i].Targets[0]
		switch {
		case tr.Accepted():
			epochs[tr.Epoch] = true
			out[i] = outbox.Outcome{Kind: outbox.OutcomeRelayAccepted, RelayKey: l.pin.RelayKey, Acceptance: &outbox.Acceptance{
				Relay: l.pin.URL, Epoch: tr.Epoch, Seq: tr.Seq, Statement: tr.Statement, Sig: tr.Sig,
				AcceptedAt: tr.At, Retention: lim.Retention(),
			}}
		case tr.Verdict == relayclient.VerdictRejected:
			out[i] = outbox.Outcome{Kind: outbox.OutcomeRejected, Err: errors.New("relay: " + mbx.StatusRejectedPrefix + tr.Code),
				Retryable: retryableRejection(tr.Code)}
		default:
			why := "no result"
			if tr.Err != nil {
				why = tr.Err.Error()
			}
			out[i] = outbox.Outcome{Kind: outbox.OutcomeFailed, Err: fmt.Errorf("relay answered %s for %s without a valid accept statement: %s",
				tr.Verdict, r.ItemID, why)}
			h.log.Warn("relay push not accepted", logkey.Row, r.Key().String(), logkey.Verdict, tr.Verdict.String(), logkey.Err, why)
		}
	}
	for e := range epochs {
		h.relayEpochSeen(l, e)
	}
	return out
}

// verifyAcceptance checks, inside the transaction that records it, that the accept statement of
// o is valid for the row as stored now: signed by the pinned relay key, for this host, the row's
// item id, its current target key and the hash of its stored wire bytes.
func (h *Host) verifyAcceptance(cur outbox.Row, o outbox.Outcome) error {
	a := o.Acceptance
	if a == nil || o.RelayKey == "" {
		return errors.New("relay-accepted outcome without an acceptance")
	}
	res := mbx.PushResult{ItemID: cur.ItemID, Status: mbx.StatusAccepted, Accept: a.Statement, Sig: a.Sig}
	acc, seq, err := mbx.ValidAccept(res, o.RelayKey, h.key.PublicKey(), cur.ItemID, cur.HostKey, mbx.WireHash(cur.Wire))
	if err != nil {
		return err
	}
	if seq != a.Seq || acc.Epoch != a.Epoch {
		return errors.New("accept statement does not say what was recorded")
	}
	return nil
}
