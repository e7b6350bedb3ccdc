package host

import (
	"context"
	"fmt"
	"time"

	"go.etcd.io/bbolt"

	"github.com/agentmbx/agentmbx/relaylink"
)

// Enrolment and publications at the relay (docs/design.md: Relay identity and pinning, Enrolment
// and publications): relayKeep runs a relaylink.Keeper over the pinned relay with this host's
// keys and peers, and records what it learned and the problems it met in the relay record.

// relayKeepEvery is how often the daemon runs relayKeep without being asked.
const relayKeepEvery = time.Minute

// relayKeep runs the enrolment and publications that are due (relaylink.Keeper.Run); force
// (after the relay refused this host's hop) republishes everything. A forced run that waited for
// another run's enrolment to complete is a normal run, so a start at which several loops find the
// host unenrolled (the receiver's first pull, a push) enrols once. It returns the first failure;
// the others are recorded too.
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
	k := relaylink.Keeper{Client: l.c, Pin: l.pin, HostKey: h.key.PublicKey(), EncPub: h.enc.PublicKey(),
		Peers: h.peerKeys, Clock: h.clock, Logger: h.log,
		Load: func() (relaylink.Published, bool, error) {
			s, err := h.loadRelay()
			if err != nil || s == nil || s.URL != l.pin.URL || s.RelayKey != l.pin.RelayKey {
				return relaylink.Published{}, false, err
			}
			return s.Published, true, nil
		},
		Proof: func() (string, error) {
			s, err := h.loadRelay()
			if err != nil || s == nil {
				return "", err
			}
			return relayToken(s.TokenFile)
		},
		Save:      func(p relaylink.Published) error { return h.saveKeep(l, p) },
		Problem:   func(op string, err error) error { return h.relayRecord(l, op, err) },
		EpochSeen: func(epoch string) { h.relayEpochSeen(l, epoch) },
	}
	ran, err := k.Run(ctx, force)
	if ran.Enrolled {
		h.rl.enrolled.Add(1)
	}
	if ran.Republished {
		h.kickOutbox() // rows that failed for want of an enrolment
		h.rl.mu.Lock()
		r := h.rl.recv
		h.rl.mu.Unlock()
		if r != nil {
			r.Kick()
		}
	}
	return err
}

// peerKeys are the pinned peers' current host keys (the sender allowlist's).
func (h *Host) peerKeys() ([]string, error) {
	peers, err := h.PeerRecords()
	if err != nil {
		return nil, err
	}
	keys := make([]string, len(peers))
	for i, p := range peers {
		keys[i] = p.HostPubkey
	}
	return keys, nil
}

// relayRecord records the outcome of op (relayFailed for a failure, which also stops relay use
// on a changed key) and returns err.
func (h *Host) relayRecord(l *relayLink, op string, err error) error {
	if err != nil {
		return h.relayFailed(l, op, err)
	}
	h.relayProblem(l, op, nil)
	return nil
}

// saveKeep stores what the keeper learned, leaving the fields others write (problems, the key
// change, the epoch) as they are in the store.
func (h *Host) saveKeep(l *relayLink, p relaylink.Published) error {
	_, err := h.updateRelay(l.pin.URL, l.pin.RelayKey, func(_ *bbolt.Tx, cur *relayState) error {
		if cur.Epoch != "" && p.Enrolled != nil && p.Enrolled.Epoch != cur.Epoch {
			// The epoch moved on while we enrolled: the cache is for the old one.
			p.Enrolled, p.EncAd, p.Senders = nil, nil, nil
		}
		cur.Published = p
		return nil
	})
	if err != nil {
		return fmt.Errorf("host: relay: %w", err)
	}
	return nil
}
