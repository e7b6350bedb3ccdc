package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.etcd.io/bbolt"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/internal/logkey"
	"github.com/agentmbx/agentmbx/lan"
	"github.com/agentmbx/agentmbx/mbx"
)

// A peer's host key rotation, as this host applies it (docs/design.md: Host key rotation).
//
// A signed rotation record (mbx.SignedRotation, T030) reaches this host over the LAN
// (POST /v1/rotate) or as a relay rotation notice (rotate_notice.go). ApplyRotation checks it
// against the pinned key and, when it moves the peer on, pins the new host key and enc key with
// the old ones retired (PinPeer): retired keys still verify what the peer signed before, the
// peer's outbox rows in every active state (pending and relay-accepted) are rebound to the new
// key, the relay's sender allowlist is republished, and quarantined relay items signed by the
// new key are released. A record this host applied already, or an older one of the same chain,
// changes nothing; anything that does not verify is refused and changes nothing.

// MaxRotationBytes caps a rotation record as received (the relay's small-body cap).
const MaxRotationBytes = mbx.RelaySmallBodyMax

// ErrRotationRefused is returned (wrapped, with the reason) for a rotation that does not verify
// against the pinned key or is otherwise not one to apply. Nothing changed.
var ErrRotationRefused = newErr(api.CodeRefused, "host key rotation refused",
	"the record must start from the key this host pinned for the peer and carry both signatures")

// RotationApplied says what ApplyRotation did.
type RotationApplied struct {
	Host    string // the peer the record names
	Applied bool   // false: a replay of a rotation already applied (nothing changed)
	OldFP   string // fingerprints of the old and the new host key
	NewFP   string
}

// ApplyRotation applies a peer's signed rotation record (its JSON as received). The record must
// name a pinned peer, start from its pinned host key, carry both signatures over the record, and
// have an iat no more than CardSkew ahead of this host's clock and not before the peer's last
// applied rotation. A record whose old and new keys are both keys of the peer's chain already
// (a replay) is verified and answered with Applied false.
func (h *Host) ApplyRotation(ctx context.Context, data []byte) (RotationApplied, error) {
	if err := ctx.Err(); err != nil {
		return RotationApplied{}, err
	}
	var out RotationApplied
	released := 0
	err := h.db.Update(func(tx *bbolt.Tx) error {
		var err error
		out, released, err = h.applyRotationTx(tx, data, "")
		return err
	})
	if err != nil {
		return RotationApplied{}, fmt.Errorf("host: apply rotation: %w", err)
	}
	h.afterRotation(out, released)
	return out, nil
}

// afterRotation logs an applied rotation and tells the daemon (afterPin).
func (h *Host) afterRotation(out RotationApplied, released int) {
	if !out.Applied {
		return
	}
	h.log.Info("peer rotated its host key", logkey.Peer, out.Host, "old", out.OldFP, "new", out.NewFP)
	h.afterPin(released)
}

// applyRotationTx is ApplyRotation in tx. sender, when not "", is the key that pushed the record
// (a relay notice): it must be a key of the peer's chain or the record's new key. It returns how
// many quarantined relay items the new pin released.
func (h *Host) applyRotationTx(tx *bbolt.Tx, data []byte, sender string) (RotationApplied, int, error) {
	refuse := func(format string, args ...any) (RotationApplied, int, error) {
		return RotationApplied{}, 0, fmt.Errorf("%w: %s", ErrRotationRefused, fmt.Sprintf(format, args...))
	}
	if len(data) > MaxRotationBytes {
		return refuse("record over %d bytes", MaxRotationBytes)
	}
	var named struct {
		Rec struct {
			Host   string `json:"host"`
			OldPub string `json:"old_pub"`
			NewPub string `json:"new_pub"`
		} `json:"rec"`
	}
	if err := json.Unmarshal(data, &named); err != nil || !mbx.ValidHostName(named.Rec.Host) {
		return refuse("%v", mbx.ErrRotationMalformed)
	}
	p, err := peerTx(tx, named.Rec.Host)
	if errors.Is(err, ErrUnpaired) {
		return refuse("%s is not a paired host", named.Rec.Host)
	} else if err != nil {
		return RotationApplied{}, 0, err
	}
	if sender != "" && !p.knowsKey(sender) && sender != named.Rec.NewPub {
		return refuse("pushed by %s, not a key of %s", mbx.Fingerprint(sender), p.Host)
	}
	out := RotationApplied{Host: p.Host, OldFP: mbx.Fingerprint(named.Rec.OldPub), NewFP: mbx.Fingerprint(named.Rec.NewPub)}
	if p.knowsKey(named.Rec.OldPub) && p.knowsKey(named.Rec.NewPub) && p.HostPubkey != named.Rec.OldPub {
		// Both keys are of the chain already: a replay. It must still verify.
		if _, err := mbx.CheckRotation(data, named.Rec.OldPub); err != nil {
			return refuse("%v", err)
		}
		return out, 0, nil
	}
	s, err := mbx.CheckRotation(data, p.HostPubkey)
	if err != nil {
		return refuse("%v (pinned %s)", err, mbx.Fingerprint(p.HostPubkey))
	}
	if err := p.checkRotationTime(s.Rec, h.clock()); err != nil {
		return refuse("%v", err)
	}
	if s.Rec.NewPub == h.key.PublicKey() {
		return refuse("the new key is this host's own")
	}
	next := p
	next.HostPubkey, next.EncPub, next.RotatedAt = s.Rec.NewPub, s.Rec.NewEncPub, s.Rec.IAT
	next.RetiredKeys = append(slices.Clone(p.RetiredKeys), p.HostPubkey)
	released, err := h.pinPeerTx(tx, &next)
	if errors.Is(err, ErrPeerKeyInUse) || errors.Is(err, ErrPeerKeyMismatch) {
		// The new key is pinned under another name: refused like any bad record, so a relay
		// notice goes to the quarantine instead of failing its page again and again.
		return refuse("%v", err)
	} else if err != nil {
		return RotationApplied{}, 0, err
	}
	out.Applied = true
	return out, released, nil
}

// knowsKey reports whether k is p's current or a retired host key.
func (p PeerRecord) knowsKey(k string) bool {
	return k != "" && (p.HostPubkey == k || slices.Contains(p.RetiredKeys, k))
}

// checkRotationTime: the record's iat parses, is at most CardSkew ahead of now, and is not before
// the rotation last applied for p.
func (p PeerRecord) checkRotationTime(rec mbx.RotationRecord, now time.Time) error {
	iat := rec.IATTime()
	if iat.IsZero() {
		return fmt.Errorf("iat %q is not a time", clip(rec.IAT, 40))
	}
	if iat.After(now.Add(CardSkew)) {
		return fmt.Errorf("iat %s is ahead of this host's clock", rec.IAT)
	}
	if last, err := mbx.ParseISOTime(p.RotatedAt); p.RotatedAt != "" && err == nil && iat.Before(last) {
		return fmt.Errorf("iat %s is before the rotation applied last (%s)", rec.IAT, p.RotatedAt)
	}
	return nil
}

// ApplyRotation is the LAN server's lan.RotationApplier.
func (l lanHost) ApplyRotation(ctx context.Context, record []byte) (bool, error) {
	res, err := l.Host.ApplyRotation(ctx, record)
	if errors.Is(err, ErrRotationRefused) {
		return false, fmt.Errorf("%w: %w", lan.ErrRotationRefused, err)
	}
	return res.Applied, err
}
