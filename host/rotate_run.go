package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/bbolt"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/inbox"
	"github.com/agentmbx/agentmbx/internal/failpoint"
	"github.com/agentmbx/agentmbx/internal/logkey"
	"github.com/agentmbx/agentmbx/lan"
	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/outbox"
	"github.com/agentmbx/agentmbx/relayclient"
	"github.com/agentmbx/agentmbx/relaylink"
)

// The network steps of this host's rotation (rotate.go describes them).

// rotationRuntime is the in-memory side of a rotation.
type rotationRuntime struct {
	gate   atomic.Bool // the relay steps before the reset are not done: no other relay use
	mu     sync.Mutex  // one continueRotation at a time
	oldPub string      // the old host key of the stored rotation ("" for none); set by Open
}

// Bounds of the rotation loop.
const (
	rotationRetryFirst = time.Second
	rotationRetryMax   = time.Minute
	rotationStepBudget = 30 * time.Second // one relay or LAN request
)

// initRotation sets the relay gate from the stored rotation (Open).
func (h *Host) initRotation() error {
	st, err := h.loadRotation()
	if err != nil {
		return fmt.Errorf("rotation: %w", err)
	}
	h.rot.gate.Store(st != nil && st.Done == "" && st.Relay.gating())
	if st != nil {
		h.rot.oldPub = st.Signed.Rec.OldPub
	}
	return nil
}

// verifyOwnAcceptance checks a relay accept statement for row cur against this host's key, or
// the old key of its rotation (the receipts the rotation pushes under the old key).
func (h *Host) verifyOwnAcceptance(cur outbox.Row, o outbox.Outcome) error {
	err := relaylink.VerifyAcceptance(cur, o, h.key.PublicKey())
	if err != nil && h.rot.oldPub != "" && relaylink.VerifyAcceptance(cur, o, h.rot.oldPub) == nil {
		return nil
	}
	return err
}

// RotationPending reports whether a rotation of this host's key is not done yet.
func (h *Host) RotationPending() (bool, error) {
	st, err := h.loadRotation()
	return st != nil && st.Done == "", err
}

// runRotation runs continueRotation until the rotation is done or ctx ends, waiting between
// tries (1 s doubling to 1 min).
func (h *Host) runRotation(ctx context.Context) {
	wait := rotationRetryFirst
	for {
		done, err := h.continueRotation(ctx)
		if done || ctx.Err() != nil {
			return
		}
		if err != nil {
			h.log.Warn("host key rotation: will retry", logkey.Err, err, "in", wait)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, rotationRetryMax)
	}
}

// continueRotation runs every rotation step not done yet, once, and reports whether the rotation
// is done (true too when there is none). The error is the first step that failed this time.
func (h *Host) continueRotation(ctx context.Context) (bool, error) {
	h.rot.mu.Lock()
	defer h.rot.mu.Unlock()
	st, err := h.loadRotation()
	if err != nil || st == nil || st.Done != "" {
		return err == nil, err
	}
	var first error
	if !st.Relay.relayDone() {
		first = h.rotateAtRelay(ctx, st)
		if first != nil {
			h.noteRotation(func(st *rotationState) {
				if st.Relay != nil {
					st.Relay.LastError = clip(first.Error(), 300)
				}
			})
		}
	}
	if err := h.rotateLAN(ctx, st); first == nil {
		first = err
	}
	done := false
	err = h.updateRotation(func(tx *bbolt.Tx, st *rotationState) error {
		peers, err := peersTx(tx)
		if err != nil {
			return err
		}
		if !st.Relay.relayDone() {
			return nil
		}
		for _, p := range peers {
			if pr := st.Peers[p.Host]; pr != nil && !peerRotationDone(pr, p, st.Relay) {
				return nil
			}
		}
		st.Done, done = mbx.ISOTime(h.clock()), true
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("host: rotation: %w", err)
	}
	if done {
		h.log.Info("host key rotation done", "old", mbx.Fingerprint(st.Signed.Rec.OldPub), logkey.Fingerprint, h.key.Fingerprint())
	}
	return done, first
}

// peerRotationDone: the peer took the LAN record, or the relay holds its notice, or it has no
// way left (no LAN address, and no relay or a final notice refusal).
func peerRotationDone(pr *rotationPeer, p PeerRecord, rel *rotationRelay) bool {
	switch {
	case pr.LAN != "" || pr.noticed():
		return true
	case p.Addr != "":
		return false
	default:
		return rel == nil || pr.Notice != ""
	}
}

// noteRotation records fn's change of the stored rotation, logging a failure to.
func (h *Host) noteRotation(fn func(st *rotationState)) {
	err := h.updateRotation(func(_ *bbolt.Tx, st *rotationState) error { fn(st); return nil })
	if err != nil {
		h.log.Error("host key rotation: record progress", logkey.Err, err)
	}
}

// rotateAtRelay runs the relay steps not done yet.
func (h *Host) rotateAtRelay(ctx context.Context, st *rotationState) error {
	rs, err := h.relay.Record()
	if err != nil {
		return err
	}
	if rs == nil || rs.URL != st.Relay.URL || rs.RelayKey != st.Relay.RelayKey {
		// The relay was unpinned or replaced: nothing to move there any more.
		h.finishRelaySteps("the relay pinned at the start is no longer pinned")
		return nil
	}
	signed, err := json.Marshal(st.Signed)
	if err != nil {
		return err
	}
	if st.Relay.Rotated == "" {
		old, err := h.retiredHostKey(st.Signed.Rec.OldPub)
		if err != nil {
			return err
		}
		c, err := relayclient.New(rs.Pin(), h.name, old, &relayclient.Options{Clock: h.clock, Logger: h.log, CA: []byte(rs.CA)})
		if err != nil {
			return err
		}
		if st.Relay.Noticed == "" {
			if err := h.pushNotices(ctx, c, st, signed); err != nil {
				return err
			}
		}
		h.pushOldReceipts(ctx, c, rs, st.Signed.Rec.OldPub)
		if err := h.relayRotate(ctx, c, st); err != nil {
			return err
		}
	}
	if st.Relay.Reset == "" {
		if err := h.resetAfterRotation(st); err != nil {
			return err
		}
	}
	return h.checkRelayPublished(ctx, st)
}

// finishRelaySteps marks the relay steps done with a note (the relay is gone) and opens the gate.
func (h *Host) finishRelaySteps(note string) {
	now := mbx.ISOTime(h.clock())
	h.noteRotation(func(st *rotationState) {
		if st.Relay != nil {
			st.Relay.Note = note
			for _, f := range []*string{&st.Relay.Noticed, &st.Relay.Rotated, &st.Relay.Reset, &st.Relay.Checked} {
				if *f == "" {
					*f = now
				}
			}
		}
	})
	h.rot.gate.Store(false)
	h.relay.Drop()
}

// pushNotices pushes a rotation notice to every peer whose notice the relay has not answered
// finally, under the old key. A retryable refusal (a full queue, a rate limit) fails the step.
func (h *Host) pushNotices(ctx context.Context, c *relayclient.Client, st *rotationState, signed []byte) error {
	peers, err := h.PeerRecords()
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
		wire, err := mbx.SealRotationNotice(h.rand, id, signed, p.EncPub)
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
		pctx, cancel := context.WithTimeout(ctx, rotationStepBudget)
		res, err := c.Push(pctx, items[:n])
		cancel()
		if errors.Is(err, relayclient.ErrNotEnrolled) {
			// The relay lost the old key's enrolment (a reset, a restore): enrol it again, so
			// the notices and the rotation find it.
			if err := h.enrolOldKey(ctx, c); err != nil {
				return fmt.Errorf("relay notices: enrol the old key: %w", err)
			}
			return fmt.Errorf("relay notices: %w (enrolled the old key again; retrying)", err)
		}
		if errors.Is(err, relayclient.ErrForbidden) {
			h.noteRotation(func(st *rotationState) {
				st.Relay.Noticed, st.Relay.Note = mbx.ISOTime(h.clock()), "the relay refuses the old key; no relay notices sent"
			})
			return nil
		}
		if err != nil {
			return fmt.Errorf("relay notices: %w", err)
		}
		err = h.updateRotation(func(_ *bbolt.Tx, st *rotationState) error {
			for i, r := range res {
				pr := st.Peers[names[i]]
				switch tr := r.Targets[0]; {
				case tr.Accepted():
					pr.Notice = tr.Verdict.String()
				case tr.Verdict == relayclient.VerdictRejected && !relaylink.RetryableRejection(tr.Code):
					pr.Notice = "rejected: " + tr.Code
				default:
					pr.Attempts++
					pr.LastError = fmt.Sprintf("relay notice: %s %s", tr.Verdict, tr.Code)
					retry = errors.New("relay notice to " + names[i] + ": " + pr.LastError)
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		items, names = items[n:], names[n:]
	}
	if retry != nil {
		return retry
	}
	h.noteRotation(func(st *rotationState) { st.Relay.Noticed = mbx.ISOTime(h.clock()) })
	return failpoint.Inject(FailRotateNoticed)
}

// pushOldReceipts pushes the pending delivery receipts this host signed with its old key, under
// the old key, before the relay revokes it: the relay takes a receipt only from the host that
// signed it, so after the rotation they could not go through the relay any more. Best effort:
// what fails stays pending (the LAN still takes it; the peer verifies it with the retired key).
func (h *Host) pushOldReceipts(ctx context.Context, c *relayclient.Client, rs *relaylink.Record, oldPub string) {
	rows, err := h.ob.List(ctx, outbox.Filter{Active: true})
	if err != nil {
		h.log.Warn("host key rotation: list receipts", logkey.Err, err)
		return
	}
	byHost := map[string][]outbox.Row{}
	for _, r := range rows {
		if r.Kind != outbox.KindReceipt || r.State != outbox.StatePending {
			continue
		}
		full, err := h.ob.Get(ctx, r.Key())
		if err != nil {
			continue
		}
		if s, err := mbx.ParseReceipt(full.Wire); err == nil && s.Verify(oldPub) {
			byHost[r.Host] = append(byHost[r.Host], full)
		}
	}
	p := &relaylink.Pusher{Client: c, Pin: rs.Pin(), Limits: rs.LimitsOrDefault(), Logger: h.log}
	for host, rows := range byHost {
		pctx, cancel := context.WithTimeout(ctx, rotationStepBudget)
		out := p.Send(pctx, outbox.Peer{Host: host}, rows)
		cancel()
		h.record(ctx, host, rows, out, outbox.TransportRelay)
	}
}

// enrolOldKey enrols the old key again with c (which signs with it).
func (h *Host) enrolOldKey(ctx context.Context, c *relayclient.Client) error {
	rs, err := h.relay.Record()
	if err != nil || rs == nil {
		return err
	}
	proof, err := relaylink.Token(rs.TokenFile)
	if err != nil {
		return err
	}
	ectx, cancel := context.WithTimeout(ctx, rotationStepBudget)
	defer cancel()
	return c.Enrol(ectx, "", proof)
}

// relayRotate is POST /v2/relay/rotate. A relay that does not know the old key (404) has nothing
// to move; the new key enrols afresh.
func (h *Host) relayRotate(ctx context.Context, c *relayclient.Client, st *rotationState) error {
	rctx, cancel := context.WithTimeout(ctx, rotationStepBudget)
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
	if err := failpoint.Inject(FailRotateRelayRotated); err != nil {
		return err
	}
	h.noteRotation(func(st *rotationState) {
		st.Relay.Rotated, st.Relay.Moved, st.Relay.Note = mbx.ISOTime(h.clock()), res.Moved, note
	})
	st.Relay.Rotated = "done"
	h.log.Info("host key rotated at the relay", logkey.Relay, st.Relay.URL, "moved", res.Moved)
	return nil
}

// resetAfterRotation resets the receive position for the relay to 0, in the transaction that
// records it, and opens the relay to the daemon's loops.
func (h *Host) resetAfterRotation(st *rotationState) error {
	err := h.updateRotation(func(tx *bbolt.Tx, st *rotationState) error {
		if _, _, err := h.rpos.In(tx).Reset(st.Relay.URL, "", inbox.ResetRotated); err != nil {
			return err
		}
		st.Relay.Reset = mbx.ISOTime(h.clock())
		return nil
	})
	if err != nil {
		return fmt.Errorf("reset receive position: %w", err)
	}
	st.Relay.Reset = "done"
	if err := failpoint.Inject(FailRotateReset); err != nil {
		return err
	}
	h.rot.gate.Store(false)
	h.relay.Drop()
	return nil
}

// checkRelayPublished enrols the new key and publishes the enc-key ad and the allowlist (a forced
// relayKeep), then checks that the relay confirmed each under the new keys.
func (h *Host) checkRelayPublished(ctx context.Context, st *rotationState) error {
	if err := h.relay.Keep(ctx, true); err != nil {
		return fmt.Errorf("republish at the relay: %w", err)
	}
	rs, err := h.relay.Record()
	if err != nil || rs == nil {
		return err
	}
	keys, err := h.relay.PeerKeys()
	if err != nil {
		return err
	}
	_, hash := relaylink.AllowList(keys)
	switch p := rs.Published; {
	case p.Enrolled == nil || p.Enrolled.HostKey != h.key.PublicKey():
		return errors.New("the relay has not confirmed the enrolment of the new key")
	case p.EncAd == nil || p.EncAd.EncPub != h.enc.PublicKey():
		return errors.New("the relay has not confirmed the enc-key ad of the new enc key")
	case p.Senders == nil || p.Senders.Hash != hash:
		return errors.New("the relay has not confirmed the sender allowlist")
	}
	h.noteRotation(func(st *rotationState) {
		st.Relay.Checked, st.Relay.LastError = mbx.ISOTime(h.clock()), ""
	})
	return nil
}

// rotateLAN sends the record to every peer with a LAN address that has not answered it yet.
func (h *Host) rotateLAN(ctx context.Context, st *rotationState) error {
	peers, err := h.PeerRecords()
	if err != nil {
		return err
	}
	signed, err := json.Marshal(st.Signed)
	if err != nil {
		return err
	}
	var first error
	for _, p := range peers {
		pr := st.Peers[p.Host]
		if pr == nil || pr.LAN != "" || p.Addr == "" {
			continue
		}
		lctx, cancel := context.WithTimeout(ctx, rotationStepBudget)
		applied, err := lan.PostRotation(lctx, h.client, p.Addr, signed)
		cancel()
		outcome := ""
		switch {
		case err == nil && applied:
			outcome = "applied"
		case err == nil:
			outcome = "had it"
		case errors.Is(err, lan.ErrRotationNotTaken):
			outcome = "refused: " + clip(err.Error(), 200)
		}
		if outcome != "" {
			if ferr := failpoint.Inject(FailRotateLANSent); ferr != nil {
				return ferr
			}
		}
		h.noteRotation(func(st *rotationState) {
			q := st.Peers[p.Host]
			if q == nil {
				return
			}
			if outcome != "" {
				q.LAN = outcome
				return
			}
			q.Attempts++
			q.LastError = clip(err.Error(), 300)
		})
		if outcome == "" && first == nil && !pr.noticed() {
			first = fmt.Errorf("LAN rotation to %s: %w", p.Host, err)
		}
	}
	return first
}

// ContinueRotation runs the steps of this host's rotation that are not done yet, once, and
// returns its progress (nil when the host never rotated). The daemon runs them until they are
// done; `agentmbx id rotate` runs them once right after PrepareRotation.
func (h *Host) ContinueRotation(ctx context.Context) (*api.Rotation, error) {
	_, err := h.continueRotation(ctx)
	st, serr := h.RotationStatus()
	if serr != nil {
		return nil, serr
	}
	return st, err
}

// RotationStatus is the progress of this host's last rotation (nil when it never rotated).
func (h *Host) RotationStatus() (*api.Rotation, error) {
	st, err := h.loadRotation()
	if err != nil || st == nil {
		return nil, err
	}
	out := &api.Rotation{OldFingerprint: mbx.Fingerprint(st.Signed.Rec.OldPub), NewFingerprint: mbx.Fingerprint(st.Signed.Rec.NewPub),
		Started: st.Started, Done: st.Done, Peers: []api.RotationPeer{}}
	if r := st.Relay; r != nil {
		out.Relay = &api.RotationRelay{URL: r.URL, Noticed: r.Noticed, Rotated: r.Rotated, Moved: r.Moved, Reset: r.Reset,
			Checked: r.Checked, Note: r.Note, LastError: r.LastError}
	}
	for _, n := range st.peerNames() {
		p := st.Peers[n]
		out.Peers = append(out.Peers, api.RotationPeer{Host: n, LAN: p.LAN, Notice: p.Notice, LastError: p.LastError, Attempts: p.Attempts})
	}
	return out, nil
}
