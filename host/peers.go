package host

import (
	"context"
	"fmt"
	"slices"
	"time"

	"go.etcd.io/bbolt"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/internal/logkey"
	"github.com/agentmbx/agentmbx/mbx"
)

// PeerRecord is a pinned peer host: its name, host key and enc key, its LAN address when known,
// and the keys it retired (still valid to verify what it signed before a rotation).
type PeerRecord struct {
	Host           string    `json:"host"`
	HostPubkey     string    `json:"host_pubkey"`
	EncPub         string    `json:"enc_pub"`
	Addr           string    `json:"addr,omitempty"` // LAN host:port, "" when unknown
	RetiredKeys    []string  `json:"retired_keys,omitempty"`
	RetiredEncKeys []string  `json:"retired_enc_keys,omitempty"`
	AddedAt        time.Time `json:"added_at"`
	// RotatedAt is the iat of the peer's last host key rotation this host applied ("" for none).
	RotatedAt string `json:"rotated_at,omitempty"`
}

// API is the record as api.Peer.
func (p PeerRecord) API() api.Peer {
	out := api.Peer{Host: p.Host, HostPubkey: p.HostPubkey, Fingerprint: mbx.Fingerprint(p.HostPubkey),
		EncPub: p.EncPub, Addr: p.Addr, RotatedAt: p.RotatedAt}
	for _, k := range p.RetiredKeys {
		out.RetiredFingerprints = append(out.RetiredFingerprints, mbx.Fingerprint(k))
	}
	return out
}

// keyFor returns the current or retired host key of p whose fingerprint is fp, or "".
func (p PeerRecord) keyFor(fp string) string {
	if mbx.Fingerprint(p.HostPubkey) == fp {
		return p.HostPubkey
	}
	for _, k := range p.RetiredKeys {
		if mbx.Fingerprint(k) == fp {
			return k
		}
	}
	return ""
}

func (p *PeerRecord) validate() error {
	switch {
	case !mbx.ValidHostName(p.Host):
		return fmt.Errorf("%w: peer host name %q", ErrInvalid, p.Host)
	case !mbx.ValidPublicKey(p.HostPubkey):
		return fmt.Errorf("%w: peer host key (want 44 chars of base64)", ErrInvalid)
	case !mbx.ValidPublicKey(p.EncPub):
		return fmt.Errorf("%w: peer enc key (want 44 chars of base64)", ErrInvalid)
	}
	if p.Addr != "" {
		if _, _, err := splitListen(p.Addr); err != nil {
			return fmt.Errorf("%w: peer address: %v", ErrInvalid, err)
		}
	}
	for _, k := range append(slices.Clone(p.RetiredKeys), p.RetiredEncKeys...) {
		if !mbx.ValidPublicKey(k) {
			return fmt.Errorf("%w: retired key of peer %s", ErrInvalid, p.Host)
		}
	}
	return nil
}

// PinPeer pins a peer, or updates a pinned one. Updating may change the enc key (the old one is
// kept as retired) and the address. A different host key under a pinned name is refused
// (ErrPeerKeyMismatch) unless p lists the pinned key in RetiredKeys (an explicit replacement,
// as after a rotation); retired keys accumulate and stay valid for verification. A key already
// pinned under another name is refused (ErrPeerKeyInUse), and so is this host itself (ErrSelf).
func (h *Host) PinPeer(p PeerRecord) error {
	if err := p.validate(); err != nil {
		return fmt.Errorf("host: pin peer: %w", err)
	}
	if p.Host == h.name || p.HostPubkey == h.key.PublicKey() {
		return fmt.Errorf("host: pin peer %s: %w", p.Host, ErrSelf)
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
	if released > 0 {
		h.wake()
	} else {
		h.kickOutbox()
	}
}

// pinPeerTx is PinPeer's transaction (p validated, AddedAt set); it returns how many
// quarantined relay items it released.
func (h *Host) pinPeerTx(tx *bbolt.Tx, p *PeerRecord) (int, error) {
	rebind := false
	b := tx.Bucket(bucketPeers)
	err := b.ForEach(func(k, _ []byte) error {
		if string(k) == p.Host {
			return nil
		}
		var o PeerRecord
		if _, err := getJSON(b, k, &o); err != nil {
			return err
		}
		if o.HostPubkey == p.HostPubkey || slices.Contains(o.RetiredKeys, p.HostPubkey) {
			return fmt.Errorf("%w (%s)", ErrPeerKeyInUse, o.Host)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	var old PeerRecord
	found, err := getJSON(b, []byte(p.Host), &old)
	if err != nil {
		return 0, err
	}
	if found {
		if old.HostPubkey != p.HostPubkey {
			if !slices.Contains(p.RetiredKeys, old.HostPubkey) {
				return 0, fmt.Errorf("%w (pinned %s, offered %s)", ErrPeerKeyMismatch,
					mbx.Fingerprint(old.HostPubkey), mbx.Fingerprint(p.HostPubkey))
			}
			rebind = true
		}
		p.RetiredKeys = mergeKeys(old.RetiredKeys, p.RetiredKeys, p.HostPubkey)
		if old.EncPub != p.EncPub {
			p.RetiredEncKeys = append(p.RetiredEncKeys, old.EncPub)
		}
		p.RetiredEncKeys = mergeKeys(old.RetiredEncKeys, p.RetiredEncKeys, p.EncPub)
		if p.Addr == "" {
			p.Addr = old.Addr
		}
		if p.RotatedAt == "" {
			p.RotatedAt = old.RotatedAt
		}
		p.AddedAt = old.AddedAt
	}
	if err := putJSON(b, []byte(p.Host), p); err != nil {
		return 0, err
	}
	if rebind {
		if _, err := h.ob.In(tx).RebindHost(p.Host, p.HostPubkey); err != nil {
			return 0, err
		}
	}
	// Relay items held only because this host was not paired yet are taken now.
	return h.relay.ReleaseTx(tx, p.HostPubkey)
}

// mergeKeys returns the union of a and b in order, without current.
func mergeKeys(a, b []string, current string) []string {
	var out []string
	for _, k := range append(slices.Clone(a), b...) {
		if k != current && !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	return out
}

// Peer returns the pinned peer named host.
func (h *Host) Peer(host string) (PeerRecord, error) {
	var p PeerRecord
	err := h.db.View(func(tx *bbolt.Tx) error {
		var err error
		p, err = peerTx(tx, host)
		return err
	})
	return p, err
}

func peerTx(tx *bbolt.Tx, host string) (PeerRecord, error) {
	var p PeerRecord
	found, err := getJSON(tx.Bucket(bucketPeers), []byte(host), &p)
	if err != nil {
		return p, err
	}
	if !found {
		return p, fmt.Errorf("peer %q: %w", host, ErrUnpaired)
	}
	return p, nil
}

// peerByKey returns the pinned peer whose current or retired host key is key.
func (h *Host) peerByKey(key string) (PeerRecord, error) {
	var out PeerRecord
	err := h.db.View(func(tx *bbolt.Tx) error {
		ps, err := peersTx(tx)
		if err != nil {
			return err
		}
		for _, p := range ps {
			if p.HostPubkey == key || slices.Contains(p.RetiredKeys, key) {
				out = p
				return nil
			}
		}
		return fmt.Errorf("peer with key %s: %w", mbx.Fingerprint(key), ErrUnpaired)
	})
	return out, err
}

func peersTx(tx *bbolt.Tx) ([]PeerRecord, error) {
	var out []PeerRecord
	err := tx.Bucket(bucketPeers).ForEach(func(k, v []byte) error {
		var p PeerRecord
		if _, err := getJSON(tx.Bucket(bucketPeers), k, &p); err != nil {
			return err
		}
		out = append(out, p)
		return nil
	})
	return out, err
}

// PeerRecords lists the pinned peers with everything stored about them.
func (h *Host) PeerRecords() ([]PeerRecord, error) {
	var out []PeerRecord
	err := h.db.View(func(tx *bbolt.Tx) error {
		var err error
		out, err = peersTx(tx)
		return err
	})
	return out, err
}

// Peers lists the paired hosts.
func (h *Host) Peers(ctx context.Context) ([]api.Peer, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	ps, err := h.PeerRecords()
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
	p, err = h.Peer(p.Host)
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
	err := h.db.Update(func(tx *bbolt.Tx) error {
		b := tx.Bucket(bucketPeers)
		if b.Get([]byte(host)) == nil {
			return fmt.Errorf("peer %q: %w", host, ErrNotFound)
		}
		return b.Delete([]byte(host))
	})
	if err != nil {
		return fmt.Errorf("host: remove peer: %w", err)
	}
	h.log.Info("peer removed", logkey.Peer, host)
	h.relay.KeepSoon() // the relay's sender allowlist names the peers
	return nil
}
