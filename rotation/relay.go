package rotation

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"go.etcd.io/bbolt"

	"github.com/agentmbx/agentmbx/checkpoint"
	"github.com/agentmbx/agentmbx/internal/failpoint"
	"github.com/agentmbx/agentmbx/internal/logkey"
	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/outbox"
	"github.com/agentmbx/agentmbx/relayclient"
	"github.com/agentmbx/agentmbx/relaylink"
)

// The relay steps of this host's rotation (doc.go lists them).

// rotateAtRelay runs the relay steps not done yet.
func (r *Rotation) rotateAtRelay(ctx context.Context, st *State) error {
	rs, err := r.c.Relay.Record()
	if err != nil {
		return err
	}
	if rs == nil || rs.URL != st.Relay.URL || rs.RelayKey != st.Relay.RelayKey {
		// The relay was unpinned or replaced: nothing to move there any more.
		r.finishRelaySteps("the relay pinned at the start is no longer pinned")
		return nil
	}
	signed, err := json.Marshal(st.Signed)
	if err != nil {
		return err
	}
	if st.Relay.Rotated == "" {
		old, err := retiredHostKey(r.c.Home, st.Signed.Rec.OldPub)
		if err != nil {
			return err
		}
		c, err := relayclient.New(rs.Pin(), r.c.Name, old, &relayclient.Options{Clock: r.c.Clock, Logger: r.c.Logger, CA: []byte(rs.CA)})
		if err != nil {
			return err
		}
		if st.Relay.Noticed == "" {
			if err := r.pushNotices(ctx, c, st, signed); err != nil {
				return err
			}
		}
		r.pushOldReceipts(ctx, c, rs, st.Signed.Rec.OldPub)
		if err := r.relayRotate(ctx, c, st); err != nil {
			return err
		}
	}
	if st.Relay.Reset == "" {
		if err := r.resetPosition(st); err != nil {
			return err
		}
	}
	return r.checkRelayPublished(ctx)
}

// finishRelaySteps marks the relay steps done with a note (the relay is gone) and opens the gate.
func (r *Rotation) finishRelaySteps(note string) {
	now := mbx.ISOTime(r.c.Clock())
	r.note(func(st *State) {
		if st.Relay != nil {
			st.Relay.Note = note
			for _, f := range []*string{&st.Relay.Noticed, &st.Relay.Rotated, &st.Relay.Reset, &st.Relay.Checked} {
				if *f == "" {
					*f = now
				}
			}
		}
	})
	r.gate.Store(false)
	r.c.Relay.Drop()
}

// pushNotices pushes a rotation notice to every peer whose notice the relay has not answered
// finally, under the old key. A retryable refusal (a full queue, a rate limit) fails the step.
func (r *Rotation) pushNotices(ctx context.Context, c *relayclient.Client, st *State, signed []byte) error {
	peers, err := r.peers()
	if err != nil {
		return err
	}
	var items []relayclient.PushItem
	var names []string
	for _, p := range peers {
		pr := st.Peers[p.Host]
		if pr == nil || pr.Notice != "" {
			continue
		}
		id := mbx.RotationNoticeID(st.Signed.Rec.NewPub, p.HostPubkey)
		wire, err := mbx.SealRotationNotice(r.c.Rand, id, signed, p.EncPub)
		if err != nil {
			return err
		}
		items = append(items, relayclient.PushItem{Kind: mbx.ItemKindEnvelope, ItemID: id,
			Targets: []relayclient.PushTarget{{HostPubkey: p.HostPubkey, Wire: wire}}})
		names = append(names, p.Host)
	}
	var retry error
	for len(items) > 0 {
		n := min(len(items), mbx.DefaultMaxBatch)
		pctx, cancel := context.WithTimeout(ctx, stepBudget)
		res, err := c.Push(pctx, items[:n])
		cancel()
		if errors.Is(err, relayclient.ErrNotEnrolled) {
			// The relay lost the old key's enrolment (a reset, a restore): enrol it again, so
			// the notices and the rotation find it.
			if err := r.enrolOldKey(ctx, c); err != nil {
				return fmt.Errorf("relay notices: enrol the old key: %w", err)
			}
			return fmt.Errorf("relay notices: %w (enrolled the old key again; retrying)", err)
		}
		if errors.Is(err, relayclient.ErrForbidden) {
			r.note(func(st *State) {
				st.Relay.Noticed, st.Relay.Note = mbx.ISOTime(r.c.Clock()), "the relay refuses the old key; no relay notices sent"
			})
			return nil
		}
		if err != nil {
			return fmt.Errorf("relay notices: %w", err)
		}
		if err := r.recordNotices(res, names[:n], &retry); err != nil {
			return err
		}
		items, names = items[n:], names[n:]
	}
	if retry != nil {
		return retry
	}
	r.note(func(st *State) { st.Relay.Noticed = mbx.ISOTime(r.c.Clock()) })
	return failpoint.Inject(FailNoticed)
}

// recordNotices records the relay's answer for each notice pushed to the peers names; retry is
// set to a retryable refusal.
func (r *Rotation) recordNotices(res []relayclient.ItemResult, names []string, retry *error) error {
	return r.update(func(_ *bbolt.Tx, st *State) error {
		for i, res := range res {
			pr := st.Peers[names[i]]
			switch tr := res.Targets[0]; {
			case tr.Accepted():
				pr.Notice = tr.Verdict.String()
			case tr.Verdict == relayclient.VerdictRejected && !relaylink.RetryableRejection(tr.Code):
				pr.Notice = "rejected: " + tr.Code
			default:
				pr.Attempts++
				pr.LastError = fmt.Sprintf("relay notice: %s %s", tr.Verdict, tr.Code)
				*retry = errors.New("relay notice to " + names[i] + ": " + pr.LastError)
			}
		}
		return nil
	})
}

// pushOldReceipts pushes the pending delivery receipts this host signed with its old key, under
// the old key, before the relay revokes it: the relay takes a receipt only from the host that
// signed it, so after the rotation they could not go through the relay any more. Best effort:
// what fails stays pending (the LAN still takes it; the peer verifies it with the retired key).
func (r *Rotation) pushOldReceipts(ctx context.Context, c *relayclient.Client, rs *relaylink.Record, oldPub string) {
	rows, err := r.c.Outbox.List(ctx, outbox.Filter{Active: true})
	if err != nil {
		r.c.Logger.Warn("host key rotation: list receipts", logkey.Err, err)
		return
	}
	byHost := map[string][]outbox.Row{}
	for _, row := range rows {
		if row.Kind != outbox.KindReceipt || row.State != outbox.StatePending {
			continue
		}
		full, err := r.c.Outbox.Get(ctx, row.Key())
		if err != nil {
			continue
		}
		if s, err := mbx.ParseReceipt(full.Wire); err == nil && s.Verify(oldPub) {
			byHost[row.Host] = append(byHost[row.Host], full)
		}
	}
	p := &relaylink.Pusher{Client: c, Pin: rs.Pin(), Limits: rs.LimitsOrDefault(), Logger: r.c.Logger}
	for host, rows := range byHost {
		pctx, cancel := context.WithTimeout(ctx, stepBudget)
		out := p.Send(pctx, outbox.Peer{Host: host}, rows)
		cancel()
		r.c.Host.RecordRelayPush(ctx, host, rows, out)
	}
}

// enrolOldKey enrols the old key again with c (which signs with it).
func (r *Rotation) enrolOldKey(ctx context.Context, c *relayclient.Client) error {
	rs, err := r.c.Relay.Record()
	if err != nil || rs == nil {
		return err
	}
	proof, err := relaylink.Token(rs.TokenFile)
	if err != nil {
		return err
	}
	ectx, cancel := context.WithTimeout(ctx, stepBudget)
	defer cancel()
	return c.Enrol(ectx, "", proof)
}

// relayRotate is POST /v2/relay/rotate. A relay that does not know the old key (404) has nothing
// to move; the new key enrols afresh.
func (r *Rotation) relayRotate(ctx context.Context, c *relayclient.Client, st *State) error {
	rctx, cancel := context.WithTimeout(ctx, stepBudget)
	res, err := c.Rotate(rctx, st.Signed)
	cancel()
	note := ""
	var se *relayclient.StatusError
	switch {
	case errors.As(err, &se) && se.Status == 404:
		note = "the relay did not know the old key; nothing moved"
	case errors.As(err, &se) && se.Status == 403:
		note = "the relay refused the rotation (the old key is revoked there); the new key enrols afresh"
	case err != nil:
		return fmt.Errorf("relay rotate: %w", err)
	}
	if err := failpoint.Inject(FailRelayRotated); err != nil {
		return err
	}
	r.note(func(st *State) {
		st.Relay.Rotated, st.Relay.Moved, st.Relay.Note = mbx.ISOTime(r.c.Clock()), res.Moved, note
	})
	st.Relay.Rotated = "done"
	r.c.Logger.Info("host key rotated at the relay", logkey.Relay, st.Relay.URL, "moved", res.Moved)
	return nil
}

// resetPosition resets the receive position for the relay to 0, in the transaction that records
// it, and opens the relay to the daemon's loops.
func (r *Rotation) resetPosition(st *State) error {
	err := r.update(func(tx *bbolt.Tx, st *State) error {
		if _, _, err := r.c.Positions.In(tx).Reset(st.Relay.URL, "", checkpoint.ResetRotated); err != nil {
			return err
		}
		st.Relay.Reset = mbx.ISOTime(r.c.Clock())
		return nil
	})
	if err != nil {
		return fmt.Errorf("reset receive position: %w", err)
	}
	st.Relay.Reset = "done"
	if err := failpoint.Inject(FailReset); err != nil {
		return err
	}
	r.gate.Store(false)
	r.c.Relay.Drop()
	return nil
}

// checkRelayPublished enrols the new key and publishes the enc-key ad and the allowlist (a forced
// Keep), then checks that the relay confirmed each under the new keys.
func (r *Rotation) checkRelayPublished(ctx context.Context) error {
	if err := r.c.Relay.Keep(ctx, true); err != nil {
		return fmt.Errorf("republish at the relay: %w", err)
	}
	rs, err := r.c.Relay.Record()
	if err != nil || rs == nil {
		return err
	}
	keys, err := r.c.Relay.PeerKeys()
	if err != nil {
		return err
	}
	_, hash := relaylink.AllowList(keys)
	switch p := rs.Published; {
	case p.Enrolled == nil || p.Enrolled.HostKey != r.c.Key.PublicKey():
		return errors.New("the relay has not confirmed the enrolment of the new key")
	case p.EncAd == nil || p.EncAd.EncPub != r.c.Enc[0].PublicKey():
		return errors.New("the relay has not confirmed the enc-key ad of the new enc key")
	case p.Senders == nil || p.Senders.Hash != hash:
		return errors.New("the relay has not confirmed the sender allowlist")
	}
	r.note(func(st *State) {
		st.Relay.Checked, st.Relay.LastError = mbx.ISOTime(r.c.Clock()), ""
	})
	return nil
}
