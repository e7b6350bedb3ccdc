package mbx

import (
	"fmt"
	"time"
)

// ExpiryNotice is the relay's signed statement that an envelope it accepted expired undelivered:
// item ItemID for target TargetPubkey, accepted at AcceptedAt, dropped at ExpiredAt. The relay
// queues it for the envelope's sender as an item of kind "expired" whose sender is the relay key.
type ExpiryNotice struct {
	V            int    `json:"v"`
	Type         string `json:"type"`
	ItemID       string `json:"item_id"`
	TargetPubkey string `json:"target_pubkey"`
	AcceptedAt   string `json:"accepted_at"`
	ExpiredAt    string `json:"expired_at"`
}

// SignedExpiryNotice is a notice with the relay's signature over its canonical JSON; its own
// canonical JSON is the item's wire.
type SignedExpiryNotice struct {
	Notice ExpiryNotice `json:"notice"`
	Sig    string       `json:"sig"`
}

// ExpiryNoticeItemID is the item id of the notice about itemID for target:
// expired:<item_id>:<target_pubkey>.
func ExpiryNoticeItemID(itemID, targetPub string) string {
	return "expired:" + itemID + ":" + targetPub
}

// SignExpiryNotice builds and signs the notice that item itemID for targetPub, accepted at
// acceptedAt, expired at expiredAt (the sweep's time).
func SignExpiryNotice(relay SigningKey, itemID, targetPub string, acceptedAt, expiredAt time.Time) (SignedExpiryNotice, error) {
	n := ExpiryNotice{V: 1, Type: "relay-expired", ItemID: itemID, TargetPubkey: targetPub, AcceptedAt: ISOTime(acceptedAt), ExpiredAt: ISOTime(expiredAt)}
	in, err := n.SigningInput()
	if err != nil {
		return SignedExpiryNotice{}, fmt.Errorf("sign expiry notice: %w", err)
	}
	return SignedExpiryNotice{Notice: n, Sig: relay.Sign(in)}, nil
}

// SigningInput is the canonical JSON of the notice.
func (n ExpiryNotice) SigningInput() ([]byte, error) { return Canonical(n) }

// NoticeItemID is the relay item id of the notice itself (not of the expired item).
func (n ExpiryNotice) NoticeItemID() string { return ExpiryNoticeItemID(n.ItemID, n.TargetPubkey) }

// Wire is canonical({notice, sig}): the bytes of the "expired" item.
func (s SignedExpiryNotice) Wire() ([]byte, error) { return Canonical(s) }

// AcceptedTime and ExpiredTime parse the notice's times (zero when they do not parse).
func (n ExpiryNotice) AcceptedTime() time.Time { t, _ := parseTime(n.AcceptedAt); return t }

// ExpiredTime is when the relay dropped the item.
func (n ExpiryNotice) ExpiredTime() time.Time { t, _ := parseTime(n.ExpiredAt); return t }

// CheckExpiryNotice is the sender's first check of a pulled "expired" item: the item's sender
// (fromSender) is the pinned relay key (ErrExpirySender), the wire is {notice, sig} with a v1
// relay-expired notice of string item_id, target_pubkey, accepted_at and expired_at
// (ErrExpiryMalformed), and the pinned relay key signed the notice as received
// (ErrExpirySignature). What the notice then does to the outbox is the host's business.
func CheckExpiryNotice(wire []byte, fromSender, pinnedRelay string) (ExpiryNotice, error) {
	if pinnedRelay == "" || fromSender != pinnedRelay {
		return ExpiryNotice{}, ErrExpirySender
	}
	m, ok := parseObject(wire)
	if !ok {
		return ExpiryNotice{}, ErrExpiryMalformed
	}
	nm, ok := m["notice"].(map[string]any)
	if !ok {
		return ExpiryNotice{}, ErrExpiryMalformed
	}
	sig, okSig := getString(m, "sig")
	n := ExpiryNotice{V: 1}
	var oks [5]bool
	n.Type, oks[0] = getString(nm, "type")
	n.ItemID, oks[1] = getString(nm, "item_id")
	n.TargetPubkey, oks[2] = getString(nm, "target_pubkey")
	n.AcceptedAt, oks[3] = getString(nm, "accepted_at")
	n.ExpiredAt, oks[4] = getString(nm, "expired_at")
	if !okSig || !isNumber(nm, "v", 1) || n.Type != "relay-expired" {
		return ExpiryNotice{}, ErrExpiryMalformed
	}
	for _, ok := range oks {
		if !ok {
			return ExpiryNotice{}, ErrExpiryMalformed
		}
	}
	in, err := Canonical(nm)
	if err != nil || !Verify(pinnedRelay, in, sig) {
		return ExpiryNotice{}, ErrExpirySignature
	}
	return n, nil
}

// SweepReport is what one retention sweep did, as the relay logs it (not signed). NoticesSkipped
// counts senders that could not be told: their key is no longer enrolled, or their own queue is
// full (their own deadline alerts them).
type SweepReport struct {
	V             int    `json:"v"`
	Type          string `json:"type"` // "relay-sweep"
	At            string `json:"at"`
	RetentionDays int    `json:"retention_days"`
	Expired       struct {
		Envelope int64 `json:"envelope"`
		Receipt  int64 `json:"receipt"`
		Expired  int64 `json:"expired"`
	} `json:"expired"`
	Notices        int64 `json:"notices"`
	NoticesSkipped struct {
		NotEnrolled int64 `json:"not_enrolled"`
		OverCap     int64 `json:"over_cap"`
	} `json:"notices_skipped"`
	DedupPruned int64 `json:"dedup_pruned"`
	FreedBytes  int64 `json:"freed_bytes"`
}
