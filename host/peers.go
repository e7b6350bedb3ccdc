package host

import (
	"context"
	"fmt"

	"go.etcd.io/bbolt"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/host/peers"
	"github.com/agentmbx/agentmbx/internal/logkey"
	"github.com/agentmbx/agentmbx/mbx"
)

// PeerRecord is a pinned peer host (package host/peers).
type PeerRecord = peers.Record

// PinPeer pins a peer, or updates a pinned one (peers.Pin: a new host key under a pinned name
// only when the record retires the pinned one, api.ErrPeerKeyMismatch otherwise; api.ErrPeerKeyInUse
// for a key pinned under another name). This host itself is refused (api.ErrSelf).
func (h *Host) PinPeer(p PeerRecord) error {
	if err := p.Validate(); err != nil {
		return fmt.Errorf("host: pin peer: %w", err)
	}
	if p.Host == h.name || p.HostPubkey == h.key.PublicKey() {
		return fmt.Errorf("host: pin peer %s: %w", p.Host, api.ErrSelf)
	}
	if p.AddedAt.IsZero() {
		p.AddedAt = h.clock().UTC()
	}
	released := 0
	err := h.db.Update(func(tx *bbolt.Tx) error {
		var err error
		released, err = h.pinPeerTx(tx, &p)
		return err
	})
	if err != nil {
		return fmt.Errorf("host: pin peer %s: %w", p.Host, err)
	}
	h.log.Info("peer pinned", logkey.Peer, p.Host, logkey.Fingerprint, mbx.Fingerprint(p.HostPubkey), logkey.Addr, p.Addr)
	h.afterPin(released)
	return nil
}

// afterPin tells the daemon that a peer was pinned: the relay's sender allowlist names the
// peers, and released quarantined items or rebound rows may be due.
func (h *Host) afterPin(released int) {
	h.relay.KeepSoon()
	h.kickOutbox() // the mail store wakes the waiters when released items are stored
}

// pinPeerTx is PinPeer's transaction (p validated, AddedAt set): the pin, the peer's outbox rows
// moved to its new key, and the quarantined relay items held only because it was not pinned yet
// (it returns how many were released).
func (h *Host) pinPeerTx(tx *bbolt.Tx, p *PeerRecord) (int, error) {
	rebind, err := peers.Pin(tx, p)
	if err != nil {
		return 0, err
	}
	if rebind {
		if _, err := h.ob.In(tx).RebindHost(p.Host, p.HostPubkey); err != nil {
			return 0, err
		}
	}
	return h.relay.ReleaseTx(tx, p.HostPubkey)
}

// peerRecord returns the pinned peer named host.
func (h *Host) peerRecord(host string) (PeerRecord, error) {
	var p PeerRecord
	err := h.db.View(func(tx *bbolt.Tx) error {
		var err error
		p, err = peers.Get(tx, host)
		return err
	})
	return p, err
}

func peerTx(tx *bbolt.Tx, host string) (PeerRecord, error) { return peers.Get(tx, host) }

func peersTx(tx *bbolt.Tx) ([]PeerRecord, error) { return peers.List(tx) }

// peerByKey returns the pinned peer whose current or retired host key is key.
func (h *Host) peerByKey(key string) (PeerRecord, error) {
	var out PeerRecord
	err := h.db.View(func(tx *bbolt.Tx) error {
		var err error
		out, err = peers.ByKey(tx, key)
		return err
	})
	return out, err
}

// peerRecords lists the pinned peers with everything stored about them.
func (h *Host) peerRecords() ([]PeerRecord, error) {
	var out []PeerRecord
	err := h.db.View(func(tx *bbolt.Tx) error {
		var err error
		out, err = peers.List(tx)
		return err
	})
	return out, err
}

// Peers lists the paired hosts.
func (h *Host) Peers(ctx context.Context) ([]api.Peer, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	ps, err := h.peerRecords()
	if err != nil {
		return nil, fmt.Errorf("host: peers: %w", err)
	}
	out := make([]api.Peer, 0, len(ps))
	for _, p := range ps {
		out = append(out, p.API())
	}
	return out, nil
}

// AddPeer pins a peer from its signed host card (ParseCard); a card whose signature fails is
// refused and nothing is pinned.
func (h *Host) AddPeer(ctx context.Context, card []byte) (api.Peer, error) {
	if err := ctx.Err(); err != nil {
		return api.Peer{}, err
	}
	p, err := ParseCard(card, h.clock())
	if err != nil {
		return api.Peer{}, fmt.Errorf("host: add peer: %w", err)
	}
	if err := h.PinPeer(p); err != nil {
		return api.Peer{}, err
	}
	p, err = h.peerRecord(p.Host)
	if err != nil {
		return api.Peer{}, fmt.Errorf("host: add peer: %w", err)
	}
	return p.API(), nil
}

// RemovePeer unpins a peer. Its active outbox rows stay (they end at their deadline, and a
// re-pairing under the same key lets them go out again); nothing is sent to it meanwhile.
func (h *Host) RemovePeer(ctx context.Context, host string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := h.db.Update(func(tx *bbolt.Tx) error { return peers.Remove(tx, host) }); err != nil {
		return fmt.Errorf("host: remove peer: %w", err)
	}
	h.log.Info("peer removed", logkey.Peer, host)
	h.relay.KeepSoon() // the relay's sender allowlist names the peers
	return nil
}
