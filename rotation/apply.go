package rotation

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.etcd.io/bbolt"

	"github.com/agentmbx/agentmbx/checkpoint"
	"github.com/agentmbx/agentmbx/internal/logkey"
	"github.com/agentmbx/agentmbx/lan"
	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/quarantine"
)

// MaxRecordBytes caps a peer's rotation record as received (the relay's small-body cap).
const MaxRecordBytes = mbx.RelaySmallBodyMax

// reasonUndecryptable is the quarantine reason of a notice no enc key opens (the host's receive
// path gives mail the same reason).
const reasonUndecryptable = "undecryptable body"

// Applied says what Apply did.
type Applied struct {
	Host    string // the peer the record names
	Applied bool   // false: a replay of a rotation already applied (nothing changed)
	OldFP   string // fingerprints of the old and the new host key
	NewFP   string
}

var _ lan.RotationApplier = lanApplier{}

// LANApplier is r as the LAN server's lan.RotationApplier (POST /v1/rotate).
func (r *Rotation) LANApplier() lan.RotationApplier { return lanApplier{r} }

type lanApplier struct{ r *Rotation }

func (l lanApplier) ApplyRotation(ctx context.Context, record []byte) (bool, error) {
	res, err := l.r.Apply(ctx, record)
	if errors.Is(err, ErrRefused) {
		return false, fmt.Errorf("%w: %w", lan.ErrRotationRefused, err)
	}
	return res.Applied, err
}

// Apply applies a peer's signed rotation record (its JSON as received). The record must name a
// pinned peer, start from its pinned host key, carry both signatures over the record, and have
// an iat no more than mbx.RotationSkew ahead of this host's clock and not before the peer's last
// applied rotation. A record whose old and new keys are both keys of the peer's chain already
// (a replay) is verified and answered with Applied false. A refusal wraps ErrRefused.
func (r *Rotation) Apply(ctx context.Context, data []byte) (Applied, error) {
	if err := ctx.Err(); err != nil {
		return Applied{}, err
	}
	var out Applied
	released := 0
	err := r.c.DB.Update(func(tx *bbolt.Tx) error {
		var err error
		out, released, err = r.applyTx(tx, data, "")
		return err
	})
	if err != nil {
		return Applied{}, fmt.Errorf("host: apply rotation: %w", err)
	}
	r.afterApply(out, released)
	return out, nil
}

// Notice is the relay receive path of a peer's rotation notice (mbx rotation notices), in the
// transaction of its page: it is opened with this host's enc keys and applied in tx. An applied
// notice or a replay is accepted; anything refused goes to the quarantine with its reason, and
// nothing else changes.
func (r *Rotation) Notice(tx *bbolt.Tx, itemID, sender string, wire []byte) (checkpoint.Verdict, error) {
	signed, err := mbx.OpenRotationNotice(wire, itemID, r.c.Enc...)
	if errors.Is(err, mbx.ErrUndecryptable) {
		return checkpoint.Rejected(quarantine.CauseUndecryptable, reasonUndecryptable), nil
	} else if err != nil {
		return checkpoint.Rejected(quarantine.CauseMalformed, clip(err.Error(), 200)), nil
	}
	out, released, err := r.applyTx(tx, signed, sender)
	if errors.Is(err, ErrRefused) {
		cause := quarantine.CauseRefused
		if peers, perr := r.c.Host.Peers(tx); perr != nil || !slices.ContainsFunc(peers, func(p Peer) bool { return p.knowsKey(sender) }) {
			cause = quarantine.CauseUnpaired
		}
		return checkpoint.Rejected(cause, clip(err.Error(), 200)), nil
	} else if err != nil {
		return checkpoint.Verdict{}, err
	}
	tx.OnCommit(func() { r.afterApply(out, released) })
	if !out.Applied {
		return checkpoint.Duplicate(), nil
	}
	return checkpoint.Accepted(), nil
}

// afterApply logs an applied rotation and tells the host (Repinned).
func (r *Rotation) afterApply(out Applied, released int) {
	if !out.Applied {
		return
	}
	r.c.Logger.Info("peer rotated its host key", logkey.Peer, out.Host, "old", out.OldFP, "new", out.NewFP)
	r.c.Host.Repinned(released)
}

// applyTx is Apply in tx. sender, when not "", is the key that pushed the record (a relay
// notice): it must be a key of the peer's chain or the record's new key. It returns how many
// quarantined relay items the new pin released.
func (r *Rotation) applyTx(tx *bbolt.Tx, data []byte, sender string) (Applied, int, error) {
	refuse := func(format string, args ...any) (Applied, int, error) {
		return Applied{}, 0, fmt.Errorf("%w: %s", ErrRefused, fmt.Sprintf(format, args...))
	}
	if len(data) > MaxRecordBytes {
		return refuse("record over %d bytes", MaxRecordBytes)
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
	peers, err := r.c.Host.Peers(tx)
	if err != nil {
		return Applied{}, 0, err
	}
	i := slices.IndexFunc(peers, func(p Peer) bool { return p.Host == named.Rec.Host })
	if i < 0 {
		return refuse("%s is not a paired host", named.Rec.Host)
	}
	p := peers[i]
	if sender != "" && !p.knowsKey(sender) && sender != named.Rec.NewPub {
		return refuse("pushed by %s, not a key of %s", mbx.Fingerprint(sender), p.Host)
	}
	out := Applied{Host: p.Host, OldFP: mbx.Fingerprint(named.Rec.OldPub), NewFP: mbx.Fingerprint(named.Rec.NewPub)}
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
	if err := p.checkTime(s.Rec, r.c.Clock()); err != nil {
		return refuse("%v", err)
	}
	if s.Rec.NewPub == r.c.Key.PublicKey() {
		return refuse("the new key is this host's own")
	}
	next := p
	next.HostPubkey, next.EncPub, next.RotatedAt = s.Rec.NewPub, s.Rec.NewEncPub, s.Rec.IAT
	next.RetiredKeys = append(slices.Clone(p.RetiredKeys), p.HostPubkey)
	released, err := r.c.Host.Repin(tx, next)
	if err != nil {
		// A refusal (the new key is pinned under another name) wraps ErrRefused, so a relay
		// notice goes to the quarantine instead of failing its page again and again.
		return Applied{}, 0, err
	}
	out.Applied = true
	return out, released, nil
}

// knowsKey reports whether k is p's current or a retired host key.
func (p Peer) knowsKey(k string) bool {
	return k != "" && (p.HostPubkey == k || slices.Contains(p.RetiredKeys, k))
}

// checkTime: the record's iat parses, is at most mbx.RotationSkew ahead of now, and is not before the
// rotation last applied for p.
func (p Peer) checkTime(rec mbx.RotationRecord, now time.Time) error {
	iat := rec.IATTime()
	if iat.IsZero() {
		return fmt.Errorf("iat %q is not a time", clip(rec.IAT, 40))
	}
	if iat.After(now.Add(mbx.RotationSkew)) {
		return fmt.Errorf("iat %s is ahead of this host's clock", rec.IAT)
	}
	if last, err := mbx.ParseISOTime(p.RotatedAt); p.RotatedAt != "" && err == nil && iat.Before(last) {
		return fmt.Errorf("iat %s is before the rotation applied last (%s)", rec.IAT, p.RotatedAt)
	}
	return nil
}
