package host

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/bbolt"

	"github.com/agentmbx/agentmbx/internal/logkey"
	"github.com/agentmbx/agentmbx/mbx"
)

// Enrolment and publications at the relay (docs/design.md: Relay identity and pinning, Enrolment
// and publications).
//
// relayKeep brings the relay up to date with this host: the relay's info (its key, checked against
// the pin; its epoch; its limits; whether it knows this host key), then, when needed, enrolment
// (challenge signed with the host key), the v2 enc-key ad (so senders can seal to this host) and
// the sender allowlist (the paired peers' keys). The enrolment cache is keyed by (relay, relay key,
// epoch, host key): a relay that forgot this host (no "you" in its info, a 401) or a new epoch
// means enrol again and republish both. The ad is republished daily (mbx.EncAdRefresh), well
// before it expires, and whenever the relay holds none; the allowlist whenever the peers change.
// Every publication is checked: a refusal is recorded as a problem that RelayStatus shows, never
// taken for success.

// relayKeepEvery is how often the daemon runs relayKeep without being asked.
const relayKeepEvery = time.Minute

// relayKeep runs the enrolment and publications that are due; force (after the relay refused
// this host's hop) republishes everything. It enrols only when the relay's signed info names no
// caller (the relay does not know this key) or the cache is for another epoch: enrolling a key
// the relay knows cannot answer a refused hop, and a refusal is often of a request sent before
// another run's enrolment. So a start at which several loops find the host unenrolled (the
// receiver's first pull, a push) enrols once, and a relay that forgot the host gets one new
// enrolment. A forced run that waited for an enrolment to complete is a normal run. It returns
// the first failure; the others are recorded too.
func (h *Host) relayKeep(ctx context.Context, force bool) error {
	seen := h.rl.enrolled.Load()
	h.rl.keepMu.Lock()
	defer h.rl.keepMu.Unlock()
	if force && h.rl.enrolled.Load() != seen {
		force = false
	}
	l, err := h.relayLink()
	if err != nil {
		return err
	}
	info, err := l.c.Info(ctx)
	if err != nil {
		return h.relayFailed(l, opInfo, err)
	}
	h.relayProblem(l, opInfo, nil)
	h.relayEpochSeen(l, info.Epoch)
	s, err := h.loadRelay()
	if err != nil {
		return err
	}
	if s == nil || s.URL != l.pin.URL || s.RelayKey != l.pin.RelayKey {
		return nil // unpinned meanwhile
	}
	lim := info.Limits
	dirty := s.Limits == nil || *s.Limits != lim
	s.Limits = &lim
	hostKey := h.key.PublicKey()
	now := h.clock()

	enrol := info.You == nil || !s.enrolledFor(info.Epoch, hostKey)
	republish := enrol || force
	if enrol {
		if err := l.c.Enrol(ctx, "", ""); err != nil {
			return h.relayFailed(l, opEnrol, err)
		}
		h.rl.enrolled.Add(1)
		h.relayProblem(l, opEnrol, nil)
		// A pull refused before enrolment (401 not enrolled) is answered by this enrolment; a
		// pull that still fails records its problem again, while the next one may be parked in
		// a long poll for many seconds.
		h.relayProblem(l, opPull, nil)
		s.Enrolled = &relayEnrolment{URL: l.pin.URL, RelayKey: l.pin.RelayKey, Epoch: info.Epoch, HostKey: hostKey, At: mbx.ISOTime(now)}
		h.log.Info("enrolled at the relay", logkey.Relay, l.pin.URL, logkey.Epoch, info.Epoch)
		if err := h.saveKeep(l, s); err != nil {
			return err
		}
	}

	var errs []error
	encPub := h.enc.PublicKey()
	ad := s.EncAd
	adDue := republish || ad == nil || ad.Epoch != info.Epoch || ad.EncPub != encPub ||
		(info.You != nil && (info.You.EncAd == nil || info.You.EncAd.EncPub != encPub || info.You.EncAd.Exp == nil))
	if !adDue {
		if at, err := mbx.ParseISOTime(ad.At); err != nil || !now.Before(at.Add(mbx.EncAdRefresh)) {
			adDue = true
		}
	}
	if adDue {
		pub, err := l.c.PublishEncAd(ctx, encPub, 0)
		if err != nil {
			errs = append(errs, h.relayFailed(l, opEncAd, err))
		} else {
			h.relayProblem(l, opEncAd, nil)
			s.EncAd = &relayEncAd{Epoch: info.Epoch, EncPub: encPub, At: mbx.ISOTime(now), Exp: pub.Exp}
			dirty = true
			h.log.Info("enc-key ad published at the relay", logkey.Relay, l.pin.URL, logkey.EncAdExp, pub.Exp)
		}
	}

	peers, err := h.PeerRecords()
	if err != nil {
		return err
	}
	keys, hash := sendersOf(peers)
	if republish || s.Senders == nil || s.Senders.Epoch != info.Epoch || s.Senders.Hash != hash {
		if _, err := l.c.PublishSenders(ctx, keys); err != nil {
			errs = append(errs, h.relayFailed(l, opSenders, err))
		} else {
			h.relayProblem(l, opSenders, nil)
			s.Senders = &relaySenders{Epoch: info.Epoch, Hash: hash, Count: len(keys), At: mbx.ISOTime(now)}
			dirty = true
			h.log.Info("sender allowlist published at the relay", logkey.Relay, l.pin.URL, logkey.Senders, len(keys))
		}
	}
	if dirty {
		if err := h.saveKeep(l, s); err != nil {
			return err
		}
	}
	if republish {
		h.kickOutbox() // rows that failed for want of an enrolment
		h.rl.mu.Lock()
		r := h.rl.recv
		h.rl.mu.Unlock()
		if r != nil {
			r.Kick()
		}
	}
	return errors.Join(errs...)
}

// saveKeep stores what relayKeep learned, leaving the fields others write (problems, the key
// change, the epoch) as they are in the store.
func (h *Host) saveKeep(l *relayLink, s *relayState) error {
	_, err := h.updateRelay(l.pin.URL, l.pin.RelayKey, func(_ *bbolt.Tx, cur *relayState) error {
		if cur.Epoch != "" && s.Enrolled != nil && s.Enrolled.Epoch != cur.Epoch {
			// The epoch moved on while we enrolled: the cache is for the old one.
			s.Enrolled, s.EncAd, s.Senders = nil, nil, nil
		}
		cur.Limits, cur.Enrolled, cur.EncAd, cur.Senders = s.Limits, s.Enrolled, s.EncAd, s.Senders
		return nil
	})
	if err != nil {
		return fmt.Errorf("host: relay: %w", err)
	}
	return nil
}
