package relayserver

import (
	"context"
	"fmt"
	"time"

	"github.com/agentmbx/agentmbx/internal/logkey"
	"github.com/agentmbx/agentmbx/mbx"
)

// Retention sweep defaults (docs/design.md: Retention and expiry).
const (
	// DefaultSweepEvery is how often RunSweeper sweeps.
	DefaultSweepEvery = time.Minute
	// DefaultSweepBatch bounds the items one Sweep transaction expires (and the dedup rows it
	// prunes), so a sweep never holds the writer for long.
	DefaultSweepBatch = 500
	// DedupGrace is what the dedup horizon adds to retention (docs/design.md: Quotas and bounds:
	// retention + 7 days).
	DedupGrace = 7 * 24 * time.Hour
)

// Sweep runs one bounded retention sweep in one transaction (docs/design.md: Retention and expiry):
// it deletes up to Options.SweepBatch items whose expiry has passed, keeping their dedup rows as
// tombstones (a late retry is a duplicate, never a re-delivery); for each expired envelope it
// queues for the envelope's sender a kind "expired" notice signed by the relay key (sender = the
// relay key, item id mbx.ExpiryNoticeItemID, exempt from sender shares but not from the sender's
// own queue caps); expired receipts and notices go silently. It also prunes up to the same number
// of dedup rows past the dedup horizon, and, of senders over Options.MaxSenderDedup (of every
// sender while the relay is at its relay-wide limits), rows past HonestRetryHorizon. After the commit it wakes the pulls parked for the senders
// that got notices. The report's counts say whether another batch may be waiting (Expired totals
// equal to the batch size).
func (s *Server) Sweep(ctx context.Context) (mbx.SweepReport, error) {
	now := s.opt.Clock()
	var rep mbx.SweepReport
	var woken []string
	var early int64
	full := s.cap.full(ctx, now)
	// Once queued, the unit is waited for even when ctx ends: it writes rep and woken, and a
	// committed sweep must wake the pulls of the senders it queued notices for.
	err := s.store.Update(context.WithoutCancel(ctx), func(tx Tx) error {
		rep, woken, early = mbx.SweepReport{}, nil, 0
		return s.sweepTx(tx, now, full, &rep, &woken, &early)
	})
	rep.V, rep.Type, rep.At, rep.RetentionDays = 1, "relay-sweep", mbx.ISOTime(now), s.lim.RetentionDays
	if err != nil {
		return rep, fmt.Errorf("relayserver: sweep: %w", err)
	}
	s.cap.free()
	if early > 0 {
		s.log.Warn("pruned dedup rows at the honest retry horizon: senders over their cap, or the relay full",
			logkey.DedupPrunedEarly, early, logkey.Full, full)
	}
	for _, k := range woken {
		s.polls.wake(k)
	}
	s.met.sweptReport(rep)
	return rep, nil
}

// sweepTx is the unit of one sweep; full says the relay is at its relay-wide limits. early
// counts the dedup rows pruned before the full horizon.
func (s *Server) sweepTx(tx Tx, now time.Time, full bool, rep *mbx.SweepReport, woken *[]string, early *int64) error {
	relay := s.key.PublicKey()
	items, err := tx.ExpiredItems(now, s.opt.SweepBatch)
	if err != nil {
		return err
	}
	told := map[string]bool{}
	for _, it := range items {
		n, err := tx.DeleteItem(it.Target, it.Seq)
		if err != nil {
			return err
		}
		rep.FreedBytes += n
		switch it.Kind {
		case KindEnvelope:
			rep.Expired.Envelope++
		case KindReceipt:
			rep.Expired.Receipt++
			continue
		default:
			rep.Expired.Expired++
			continue
		}
		queued, err := s.queueNotice(tx, it, relay, now, rep)
		if err != nil {
			return err
		}
		if queued && !told[it.Sender] {
			told[it.Sender] = true
			*woken = append(*woken, it.Sender)
		}
	}
	pruned, err := tx.PruneDedup(now.Add(-(2*s.lim.Retention() + DedupGrace)), 0, s.opt.SweepBatch)
	if err != nil {
		return err
	}
	rep.DedupPruned = pruned
	// Senders over their cap of dedup rows, and everyone while the relay is full, keep their rows
	// only for the honest retry horizon (docs/design.md: Quotas and bounds).
	honest := now.Add(-HonestRetryHorizon(s.lim.Retention()))
	if s.opt.MaxSenderDedup > 0 && pruned < int64(s.opt.SweepBatch) {
		n, err := tx.PruneDedup(honest, s.opt.MaxSenderDedup, s.opt.SweepBatch-int(pruned))
		if err != nil {
			return err
		}
		*early += n
		pruned += n
	}
	if full && pruned < int64(s.opt.SweepBatch) {
		n, err := tx.PruneDedup(honest, 0, s.opt.SweepBatch-int(pruned))
		if err != nil {
			return err
		}
		*early += n
		pruned += n
	}
	rep.DedupPruned = pruned
	return nil
}

// queueNotice queues the expiry notice of envelope it for its sender and reports whether it did.
// A sender that is gone (not enrolled, revoked) or whose own queue is full is skipped and
// counted: its own deadline tells it (docs/design.md: Push and acceptance).
func (s *Server) queueNotice(tx Tx, it Item, relay string, now time.Time, rep *mbx.SweepReport) (bool, error) {
	sn, err := mbx.SignExpiryNotice(s.key, it.ItemID, it.Target, it.AcceptedAt, now)
	if err != nil {
		return false, err
	}
	wire, err := sn.Wire()
	if err != nil {
		return false, err
	}
	id := mbx.ExpiryNoticeItemID(it.ItemID, it.Target)
	a, err := tx.Admission(relay, id, it.Sender)
	if err != nil {
		return false, err
	}
	n := int64(len(wire))
	switch {
	case a.Duplicate:
		return false, nil
	case !a.Enrolled || !a.Target.Live():
		rep.NoticesSkipped.NotEnrolled++
		return false, nil
	case a.Usage.Target.Items+1 > s.lim.MaxQueueItems || a.Usage.Target.Bytes+n > s.lim.MaxQueueBytes:
		rep.NoticesSkipped.OverCap++
		return false, nil
	}
	if _, err := tx.InsertItem(Item{Target: it.Sender, Kind: KindExpired, ItemID: id, Sender: relay,
		Wire: wire, WireHash: mbx.SHA256Hex(wire), AcceptedAt: now,
		ExpiresAt: now.Add(s.lim.Retention())}); err != nil {
		return false, err
	}
	rep.Notices++
	return true, nil
}

// RunSweeper sweeps every Options.SweepEvery until ctx is done, running further batches at once
// while a sweep filled its batch. Failures are logged and retried at the next tick. Serve runs
// it; a caller running the Server itself starts it the same way.
func (s *Server) RunSweeper(ctx context.Context) {
	c, stop := s.opt.SweepTicker(s.opt.SweepEvery)
	defer stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-c:
		}
		for ctx.Err() == nil {
			rep, err := s.Sweep(ctx)
			if err != nil {
				s.log.Warn("retention sweep failed", logkey.Err, err)
				break
			}
			n := rep.Expired.Envelope + rep.Expired.Receipt + rep.Expired.Expired
			if n > 0 || rep.DedupPruned > 0 {
				s.log.Info("retention sweep", logkey.ExpiredEnvelopes, rep.Expired.Envelope,
					logkey.ExpiredReceipts, rep.Expired.Receipt, logkey.ExpiredNotices, rep.Expired.Expired,
					logkey.Notices, rep.Notices, logkey.SkippedNotEnrolled, rep.NoticesSkipped.NotEnrolled,
					logkey.SkippedOverCap, rep.NoticesSkipped.OverCap, logkey.DedupPruned, rep.DedupPruned)
			}
			if n < int64(s.opt.SweepBatch) && rep.DedupPruned < int64(s.opt.SweepBatch) {
				break
			}
		}
	}
}

func defaultTicker(d time.Duration) (<-chan time.Time, func()) {
	t := time.NewTicker(d)
	return t.C, t.Stop
}
