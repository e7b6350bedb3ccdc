package relaylink

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/agentmbx/agentmbx/internal/failpoint"
	"github.com/agentmbx/agentmbx/internal/logkey"
	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/outbox"
	"github.com/agentmbx/agentmbx/relayclient"
)

// FailAfterPushBeforeRecord fires after a push answered and before its outcomes are recorded in
// the outbox (see package failpoint; MBX_FAILPOINT in crash tests).
const FailAfterPushBeforeRecord = "host.relay.after-push-before-record"

// MaxPushBytes bounds the wire bytes of one push (the relay caps bodies at 8 MiB; base64 adds a
// third).
const MaxPushBytes = 5 << 20

// retryableRejections are the relay's rejection codes (after "rejected:") where a later retry of
// the same bytes can succeed.
var retryableRejections = []string{"quota:", "rate", "target not enrolled", "sender not accepted by target", "target revoked"}

// RetryableRejection reports whether a relay rejection code is one a later retry of the same
// bytes can get past (a quota, a rate limit, a target not yet enrolled or not yet allowing
// this sender). "target revoked" is one too: the target rotated its key, and the row waits, up
// to its own deadline, for the rotation record that rebinds it to the new key; ending it at once
// would lose mail that the rotation is about to make deliverable.
func RetryableRejection(code string) bool {
	for _, p := range retryableRejections {
		if code == p || (strings.HasSuffix(p, ":") && strings.HasPrefix(code, p)) {
			return true
		}
	}
	return false
}

// A Refusal is the relay's refusal of one pushed item, under a signed push answer: Code is the
// wire's rejection code ("rate", "quota:items", "conflict", …).
type Refusal struct{ Code string }

func (r *Refusal) Error() string { return "relay: " + mbx.StatusRejectedPrefix + r.Code }

// Pusher pushes outbox rows to the pinned relay; it is an outbox.Sender. Client pushes to a v2
// relay; V1, when set instead, to a relay that speaks only v1 (v1.go).
type Pusher struct {
	Client *relayclient.Client
	V1     *V1Push
	Pin    relayclient.Pin
	Limits mbx.Limits // the relay's announced limits (mbx.DefaultLimits when unknown)
	Logger *slog.Logger
	// Observe is told the outcome of each push request (nil on success); EpochSeen each epoch
	// an accept statement named. Either may be nil.
	Observe   func(err error)
	EpochSeen func(epoch string)
	// Pacer, when set, paces and coalesces the pushes of every Pusher sharing it (pace.go).
	Pacer *Pacer
}

var _ outbox.Sender = (*Pusher)(nil)

// Kind is outbox.TransportRelay.
func (p *Pusher) Kind() outbox.Transport { return outbox.TransportRelay }

// Send pushes rows (addressed by each row's pinned host key; peer is not used) in batches that fit
// the relay's max_batch and MaxPushBytes, through the Pacer when one is set, and returns one
// outcome per row. A row is
// OutcomeRelayAccepted only with an accept statement the client verified against the pinned key;
// the caller checks it again in the transaction that records it (VerifyAcceptance).
func (p *Pusher) Send(ctx context.Context, peer outbox.Peer, rows []outbox.Row) []outbox.Outcome {
	if p.V1 != nil {
		return p.sendV1(ctx, peer, rows)
	}
	if p.Pacer != nil {
		return p.Pacer.send(ctx, p, rows)
	}
	return p.batches(ctx, rows)
}

// batches pushes rows without a Pacer, in batches that fit max_batch and MaxPushBytes.
func (p *Pusher) batches(ctx context.Context, rows []outbox.Row) []outbox.Outcome {
	maxBatch := max(1, min(p.Limits.MaxBatch, mbx.DefaultMaxBatch))
	out := make([]outbox.Outcome, len(rows))
	for start := 0; start < len(rows); {
		n, size := 0, 0
		for start+n < len(rows) && n < maxBatch && (n == 0 || size+len(rows[start+n].Wire) <= MaxPushBytes) {
			size += len(rows[start+n].Wire)
			n++
		}
		copy(out[start:start+n], p.push(ctx, rows[start:start+n]))
		start += n
	}
	return out
}

// push sends one batch.
func (p *Pusher) push(ctx context.Context, rows []outbox.Row) []outbox.Outcome {
	if p.V1 != nil {
		return p.pushV1(ctx, rows)
	}
	items := make([]relayclient.PushItem, len(rows))
	for i, r := range rows {
		kind := mbx.ItemKindEnvelope
		if r.Kind == outbox.KindReceipt {
			kind = mbx.ItemKindReceipt
		}
		items[i] = relayclient.PushItem{Kind: kind, ItemID: r.ItemID,
			Targets: []relayclient.PushTarget{{HostPubkey: r.HostKey, Wire: r.Wire}}}
	}
	res, err := p.Client.Push(ctx, items)
	if p.Observe != nil {
		p.Observe(err)
	}
	if err != nil {
		// No answer at all marks the rows Unreachable: the host then counts the relay down.
		return outbox.FailedAll(len(rows), fmt.Errorf("relay push: %w", err), NoAnswer(err))
	}
	// Crash drill: the relay committed the push, the host has not recorded its answer.
	_ = failpoint.Inject(FailAfterPushBeforeRecord)
	out := make([]outbox.Outcome, len(rows))
	epochs := map[string]bool{}
	for i, r := range rows {
		tr := res[i].Targets[0]
		switch {
		case tr.Accepted():
			epochs[tr.Epoch] = true
			out[i] = outbox.Outcome{Kind: outbox.OutcomeRelayAccepted, RelayKey: p.Pin.RelayKey, Acceptance: &outbox.Acceptance{
				Relay: p.Pin.URL, Epoch: tr.Epoch, Seq: tr.Seq, Statement: tr.Statement, Sig: tr.Sig,
				AcceptedAt: tr.At, Retention: p.Limits.Retention(),
			}}
		case tr.Verdict == relayclient.VerdictRejected:
			out[i] = outbox.Outcome{Kind: outbox.OutcomeRejected, Err: &Refusal{Code: tr.Code},
				Retryable: RetryableRejection(tr.Code)}
		default:
			why := "no result"
			if tr.Err != nil {
				why = tr.Err.Error()
			}
			out[i] = outbox.Outcome{Kind: outbox.OutcomeFailed, Err: fmt.Errorf("relay answered %s for %s without a valid accept statement: %s",
				tr.Verdict, r.ItemID, why)}
			if p.Logger != nil {
				p.Logger.Warn("relay push not accepted", logkey.Row, r.Key().String(), logkey.Verdict, tr.Verdict.String(), logkey.Err, why)
			}
		}
	}
	if p.EpochSeen != nil {
		for e := range epochs {
			p.EpochSeen(e)
		}
	}
	return out
}

// VerifyAcceptance checks that the accept statement of o is valid for the row as stored now
// (cur): signed by the relay key o names (the pinned one), for hostKey (this host), the row's
// item id, its current target key and the hash of its stored wire bytes, and saying the epoch
// and seq o records. The outbox loop calls it inside the transaction that records the move.
func VerifyAcceptance(cur outbox.Row, o outbox.Outcome, hostKey string) error {
	a := o.Acceptance
	if a == nil || o.RelayKey == "" {
		return errors.New("relay-accepted outcome without an acceptance")
	}
	res := mbx.PushResult{ItemID: cur.ItemID, Status: mbx.StatusAccepted, Accept: a.Statement, Sig: a.Sig}
	acc, seq, err := mbx.ValidAccept(res, o.RelayKey, hostKey, cur.ItemID, cur.HostKey, mbx.WireHash(cur.Wire))
	if err != nil {
		return err
	}
	if seq != a.Seq || acc.Epoch != a.Epoch {
		return errors.New("accept statement does not say what was recorded")
	}
	return nil
}
