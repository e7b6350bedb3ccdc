package relaylink

import (
	"context"
	"fmt"
	"time"

	"go.etcd.io/bbolt"
)

// Enrolment and publications at the relay (docs/design.md: Relay identity and pinning, Enrolment
// and publications): Keep runs a Keeper over the pinned relay with the host's keys and peers, and
// records what it learned and the problems it met in the relay record.

// keepEvery is how often the daemon runs Keep without being asked.
const keepEvery = time.Minute

// Keep runs the enrolment and publications that are due (Keeper.Run); force (after the relay
// refused the host's hop) republishes everything. A forced run that waited for another run's
// enrolment to complete is a normal run, so a start at which several loops find the host
// unenrolled (the receiver's first pull, a push) enrols once. It returns the first failure; the
// others are recorded too.
func (l *Link) Keep(ctx context.Context, force bool) error {
	seen := l.enrolled.Load()
	l.keepMu.Lock()
	defer l.keepMu.Unlock()
	if force && l.enrolled.Load() != seen {
		force = false
	}
	c, err := l.Conn()
	if err != nil {
		return err
	}
	if c.V1 != nil {
		return l.keepV1(ctx, c, force)
	}
	k := Keeper{Client: c.Client, Pin: c.Pin, HostKey: l.key.PublicKey(), EncPub: l.enc,
		Peers: l.PeerKeys, Clock: l.clock, Logger: l.log,
		Load: func() (Published, bool, error) {
			s, err := l.load()
			if err != nil || s == nil || s.URL != c.Pin.URL || s.RelayKey != c.Pin.RelayKey {
				return Published{}, false, err
			}
			return s.Published, true, nil
		},
		Proof: func() (string, error) {
			s, err := l.load()
			if err != nil || s == nil {
				return "", err
			}
			return Token(s.TokenFile)
		},
		Save:      func(p Published) error { return l.saveKeep(c, p) },
		Problem:   func(op string, err error) error { return l.recordOutcome(c, op, err) },
		EpochSeen: func(epoch string) { l.epochSeen(c, epoch) },
	}
	ran, err := k.Run(ctx, force)
	if ran.Enrolled {
		l.enrolled.Add(1)
	}
	if ran.Republished {
		l.host.KickOutbox() // rows that failed for want of an enrolment
		l.kickReceiver()
	}
	return err
}

// PeerKeys are the pinned peers' current host keys (the sender allowlist's).
func (l *Link) PeerKeys() ([]string, error) {
	var keys []string
	err := l.db.View(func(tx *bbolt.Tx) error {
		var err error
		keys, err = l.peerKeysTx(tx)
		return err
	})
	return keys, err
}

// saveKeep stores what the keeper learned, leaving the fields others write (problems, the key
// change, the epoch) as they are in the store.
func (l *Link) saveKeep(c *Conn, p Published) error {
	_, err := l.update(c.Pin, func(_ *bbolt.Tx, cur *Record) error {
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
