// Package peers is the host's store of pinned peers: one bucket of the host's bbolt file (Bucket:
// host name → Record JSON), read and written inside the caller's transactions, so that a pin
// commits with what it changes elsewhere (outbox rows rebound to a new key, quarantined relay
// items released). A peer's host key is pinned once: a different key under a pinned name is
// refused unless the new record retires the pinned key explicitly (as after a rotation), and a
// key is pinned under one name only. Retired keys accumulate and stay valid for verification.
package peers

import (
	"fmt"
	"net"
	"slices"
	"strconv"
	"time"

	"go.etcd.io/bbolt"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/host/internal/boltjson"
	"github.com/agentmbx/agentmbx/mbx"
)

// Bucket is the name of the peers bucket in the host's store; the host creates it.
var Bucket = []byte("peers")

// Record is a pinned peer host: its name, host key and enc key, its LAN address when known, and
// the keys it retired (still valid to verify what it signed before a rotation).
type Record struct {
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
func (p Record) API() api.Peer {
	out := api.Peer{Host: p.Host, HostPubkey: p.HostPubkey, Fingerprint: mbx.Fingerprint(p.HostPubkey),
		EncPub: p.EncPub, Addr: p.Addr, RotatedAt: p.RotatedAt}
	for _, k := range p.RetiredKeys {
		out.RetiredFingerprints = append(out.RetiredFingerprints, mbx.Fingerprint(k))
	}
	return out
}

// KeyFor returns the current or retired host key of p whose fingerprint is fp, or "".
func (p Record) KeyFor(fp string) string {
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

// KnowsKey reports whether k is p's current or a retired host key.
func (p Record) KnowsKey(k string) bool {
	return k != "" && (p.HostPubkey == k || slices.Contains(p.RetiredKeys, k))
}

// Validate checks the record's names, keys and address (api.ErrInvalid says which).
func (p *Record) Validate() error {
	switch {
	case !mbx.ValidHostName(p.Host):
		return fmt.Errorf("%w: peer host name %q", api.ErrInvalid, p.Host)
	case !mbx.ValidPublicKey(p.HostPubkey):
		return fmt.Errorf("%w: peer host key (want 44 chars of base64)", api.ErrInvalid)
	case !mbx.ValidPublicKey(p.EncPub):
		return fmt.Errorf("%w: peer enc key (want 44 chars of base64)", api.ErrInvalid)
	}
	if p.Addr != "" {
		if _, _, err := SplitAddr(p.Addr); err != nil {
			return fmt.Errorf("%w: peer address: %v", api.ErrInvalid, err)
		}
	}
	for _, k := range append(slices.Clone(p.RetiredKeys), p.RetiredEncKeys...) {
		if !mbx.ValidPublicKey(k) {
			return fmt.Errorf("%w: retired key of peer %s", api.ErrInvalid, p.Host)
		}
	}
	return nil
}

// SplitAddr checks a listen or dial address host:port (the host may be empty for a listen
// address) and returns its parts.
func SplitAddr(s string) (string, int, error) {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return "", 0, fmt.Errorf("address %q: want host:port", clip(s, 64))
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 0 || n > 65535 {
		return "", 0, fmt.Errorf("address %q: bad port", clip(s, 64))
	}
	return host, n, nil
}

// clip shortens outside input for an error message.
func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// Pin stores p (validated, AddedAt set) in tx, or updates the pinned record of its name. Updating
// may change the enc key (the old one is kept as retired) and the address. A different host key
// under the pinned name is refused (api.ErrPeerKeyMismatch) unless p lists the pinned key in
// RetiredKeys; then rebind is true: the caller moves the peer's outbox rows to the new key. A
// key already pinned under another name is refused (api.ErrPeerKeyInUse). p is updated to what
// was stored.
func Pin(tx *bbolt.Tx, p *Record) (rebind bool, err error) {
	b := tx.Bucket(Bucket)
	err = b.ForEach(func(k, _ []byte) error {
		if string(k) == p.Host {
			return nil
		}
		var o Record
		if _, err := boltjson.Get(b, k, &o); err != nil {
			return err
		}
		if o.HostPubkey == p.HostPubkey || slices.Contains(o.RetiredKeys, p.HostPubkey) {
			return fmt.Errorf("%w (%s)", api.ErrPeerKeyInUse, o.Host)
		}
		return nil
	})
	if err != nil {
		return false, err
	}
	var old Record
	found, err := boltjson.Get(b, []byte(p.Host), &old)
	if err != nil {
		return false, err
	}
	if found {
		if old.HostPubkey != p.HostPubkey {
			if !slices.Contains(p.RetiredKeys, old.HostPubkey) {
				return false, fmt.Errorf("%w (pinned %s, offered %s)", api.ErrPeerKeyMismatch,
					mbx.Fingerprint(old.HostPubkey), mbx.Fingerprint(p.HostPubkey))
			}
			rebind = true
		}
		merge(p, old)
	}
	return rebind, boltjson.Put(b, []byte(p.Host), p)
}

// merge keeps what old knew and p does not say: retired keys (old's current enc key among them
// when p brings another), the address, the last rotation and the time first pinned.
func merge(p *Record, old Record) {
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

// Get returns the pinned peer named host (api.ErrUnpaired when there is none).
func Get(tx *bbolt.Tx, host string) (Record, error) {
	var p Record
	found, err := boltjson.Get(tx.Bucket(Bucket), []byte(host), &p)
	if err != nil {
		return p, err
	}
	if !found {
		return p, fmt.Errorf("peer %q: %w", host, api.ErrUnpaired)
	}
	return p, nil
}

// ByKey returns the pinned peer whose current or retired host key is key (api.ErrUnpaired when
// there is none).
func ByKey(tx *bbolt.Tx, key string) (Record, error) {
	ps, err := List(tx)
	if err != nil {
		return Record{}, err
	}
	for _, p := range ps {
		if p.HostPubkey == key || slices.Contains(p.RetiredKeys, key) {
			return p, nil
		}
	}
	return Record{}, fmt.Errorf("peer with key %s: %w", mbx.Fingerprint(key), api.ErrUnpaired)
}

// List lists the pinned peers, by name.
func List(tx *bbolt.Tx) ([]Record, error) {
	return boltjson.All[Record](tx.Bucket(Bucket))
}

// Remove unpins host (api.ErrNotFound when it is not pinned).
func Remove(tx *bbolt.Tx, host string) error {
	b := tx.Bucket(Bucket)
	if b.Get([]byte(host)) == nil {
		return fmt.Errorf("peer %q: %w", host, api.ErrNotFound)
	}
	return b.Delete([]byte(host))
}
