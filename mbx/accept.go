package mbx

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Item kinds on the relay.
const (
	ItemKindEnvelope = "envelope" // a sealed envelope v3; wire = the sender's exact JSON bytes
	ItemKindReceipt  = "receipt"  // a delivery receipt; wire = canonical({rec, sig})
	ItemKindExpired  = "expired"  // a relay expiry notice for a sender; wire = canonical({notice, sig})
)

// Push statuses. A rejection is StatusRejectedPrefix followed by a code ("rejected:conflict").
const (
	StatusAccepted       = "accepted"
	StatusDuplicate      = "duplicate"
	StatusRejectedPrefix = "rejected:"
)

// PushTarget is one target of a pushed item: the target's host key and the exact wire bytes in
// standard base64.
type PushTarget struct {
	HostPubkey string `json:"host_pubkey"`
	WireB64    string `json:"wire_b64"`
}

// PushItem is one item of POST /v2/relay/items.
type PushItem struct {
	Kind    string       `json:"kind"`
	ItemID  string       `json:"item_id"`
	Targets []PushTarget `json:"targets"`
}

// PushRequest is the body of POST /v2/relay/items.
type PushRequest struct {
	Items []PushItem `json:"items"`
}

// ResultTarget is a target's seq in a push result.
type ResultTarget struct {
	HostPubkey string `json:"host_pubkey"`
	Seq        int64  `json:"seq"`
}

// PushResult is the relay's answer for one pushed item. For accepted and duplicate items Accept is
// the relay's accept statement exactly as signed and Sig the relay's signature over its canonical
// JSON; a rejected item has neither and no targets.
type PushResult struct {
	ItemID  string          `json:"item_id"`
	Status  string          `json:"status"`
	Targets []ResultTarget  `json:"targets"`
	Accept  json.RawMessage `json:"accept,omitempty"`
	Sig     string          `json:"sig,omitempty"`
}

// PushResponse is the answer to POST /v2/relay/items: one result per item. HTTP 200 only means the
// answer is in this body; each item's fate is its status.
type PushResponse struct {
	Results []PushResult `json:"results"`
}

// AcceptTarget is one target of an accept statement: the seq the relay gave the item for that
// target and the hash of the exact wire bytes it stored.
type AcceptTarget struct {
	HostPubkey string `json:"host_pubkey"`
	Seq        int64  `json:"seq"`
	WireHash   string `json:"wire_hash"`
}

// Accept is the relay's signed statement that it durably committed an item for its targets. It is
// a transport fact, not a delivery. At is the time of the first acceptance: a pure duplicate
// carries the original time, so the sender's deadline does not move with retries.
type Accept struct {
	V            int            `json:"v"`
	Type         string         `json:"type"`
	RelayPubkey  string         `json:"relay_pubkey"`
	Epoch        string         `json:"epoch"`
	SenderPubkey string         `json:"sender_pubkey"`
	ItemID       string         `json:"item_id"`
	Targets      []AcceptTarget `json:"targets"`
	At           string         `json:"at"`
}

// WireHash is the lowercase hex SHA-256 of the exact wire bytes.
func WireHash(wire []byte) string { return SHA256Hex(wire) }

// AcceptType is the type of an accept statement.
const AcceptType = "relay-accept"

// NewAccept builds the accept statement of relay for an item at (its first acceptance time).
func NewAccept(relayPub, epoch, senderPub, itemID string, targets []AcceptTarget, at time.Time) Accept {
	if targets == nil {
		targets = []AcceptTarget{}
	}
	return Accept{V: 1, Type: AcceptType, RelayPubkey: relayPub, Epoch: epoch, SenderPubkey: senderPub, ItemID: itemID, Targets: targets, At: ISOTime(at)}
}

// SigningInput is the canonical JSON of the statement.
func (a Accept) SigningInput() ([]byte, error) {
	if b, ok := appendAcceptJSON(make([]byte, 0, 384), a, true); ok {
		return b, nil
	}
	return Canonical(a)
}

// acceptField names a field of Accept for appendAcceptJSON.
type acceptField int

const (
	acceptV acceptField = iota
	acceptType
	acceptRelay
	acceptEpoch
	acceptSender
	acceptItem
	acceptTargets
	acceptAt
)

// The orders of Accept's fields: as encoding/json writes them (the struct's), and canonical
// (keys sorted).
var (
	acceptStructOrder    = [...]acceptField{acceptV, acceptType, acceptRelay, acceptEpoch, acceptSender, acceptItem, acceptTargets, acceptAt}
	acceptCanonicalOrder = [...]acceptField{acceptAt, acceptEpoch, acceptItem, acceptRelay, acceptSender, acceptTargets, acceptType, acceptV}
)

// appendAcceptJSON appends a as JSON without a generic encoder, the relay's hot path: canonical
// (keys in canonical order) or in field order as encoding/json writes it. ok is false when a holds
// a string that is not plain printable ASCII or a number outside the safe integer range; only the
// generic encoders spell those right.
func appendAcceptJSON(buf []byte, a Accept, canonical bool) ([]byte, bool) {
	if !plainAccept(&a) {
		return buf, false
	}
	order := &acceptStructOrder
	if canonical {
		order = &acceptCanonicalOrder
	}
	return writeAcceptJSON(buf, &a, order), true
}

// plainAccept reports whether appendAcceptJSON spells a itself: every string plain printable
// ASCII, every number a safe integer.
func plainAccept(a *Accept) bool {
	ok := plainASCII(a.Type) && plainASCII(a.RelayPubkey) && plainASCII(a.Epoch) &&
		plainASCII(a.SenderPubkey) && plainASCII(a.ItemID) && plainASCII(a.At) && safeInt(int64(a.V))
	for _, t := range a.Targets {
		ok = ok && plainASCII(t.HostPubkey) && plainASCII(t.WireHash) && safeInt(t.Seq)
	}
	return ok
}

// writeAcceptJSON appends a, which plainAccept accepted, with its fields in order.
func writeAcceptJSON(buf []byte, a *Accept, order *[8]acceptField) []byte {
	str := func(k, v string) {
		buf = append(append(append(append(buf, '"'), k...), `":"`...), v...)
		buf = append(buf, '"')
	}
	num := func(k string, v int64) {
		buf = strconv.AppendInt(append(append(append(buf, '"'), k...), `":`...), v, 10)
	}
	targets := func() {
		buf = append(buf, `"targets":`...)
		if a.Targets == nil {
			buf = append(buf, "null"...)
			return
		}
		buf = append(buf, '[')
		for i, t := range a.Targets {
			if i > 0 {
				buf = append(buf, ',')
			}
			buf = append(buf, '{')
			str("host_pubkey", t.HostPubkey)
			buf = append(buf, ',')
			num("seq", t.Seq)
			buf = append(buf, ',')
			str("wire_hash", t.WireHash)
			buf = append(buf, '}')
		}
		buf = append(buf, ']')
	}
	field := func(f acceptField) {
		switch f {
		case acceptV:
			num("v", int64(a.V))
		case acceptType:
			str("type", a.Type)
		case acceptRelay:
			str("relay_pubkey", a.RelayPubkey)
		case acceptEpoch:
			str("epoch", a.Epoch)
		case acceptSender:
			str("sender_pubkey", a.SenderPubkey)
		case acceptItem:
			str("item_id", a.ItemID)
		case acceptTargets:
			targets()
		case acceptAt:
			str("at", a.At)
		}
	}
	buf = append(buf, '{')
	for i, f := range order {
		if i > 0 {
			buf = append(buf, ',')
		}
		field(f)
	}
	return append(buf, '}')
}

// plainASCII reports whether s needs no escaping in JSON by any encoder: printable ASCII without
// quotes or backslashes.
func plainASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// safeInt reports whether v is an integer JSON numbers carry exactly, spelled the same by every
// encoder.
func safeInt(v int64) bool { return v >= -(1<<53) && v <= 1<<53 }

// SignAccept signs the statement with the relay key.
func SignAccept(relay SigningKey, a Accept) (string, error) {
	in, err := a.SigningInput()
	if err != nil {
		return "", fmt.Errorf("sign accept: %w", err)
	}
	return relay.Sign(in), nil
}

// AcceptedResult is the push result for an accepted or duplicate item (status StatusAccepted or
// StatusDuplicate): it signs a with the relay key and lists each target's seq.
func AcceptedResult(relay SigningKey, status string, a Accept) (PushResult, error) {
	return new(AcceptBuf).Result(relay, status, a)
}

// AcceptBuf is memory AcceptBuf.Result reuses from one statement to the next: the signing input
// is written over the last one, and the statements' JSON one after the other into one arena
// (each result's Accept is its own slice of it, valid as long as the result, or until Reset).
// Not for concurrent use.
type AcceptBuf struct {
	input, arena []byte
}

// acceptInputSize is room for the signing input of a statement with one target (about 330
// bytes with 44-character keys), so that a fresh AcceptBuf does not grow it step by step.
const acceptInputSize = 512

// Reset makes the whole arena free again for the next statements: every result Result returned
// before must no longer be used (its Accept bytes will be written over).
func (b *AcceptBuf) Reset() { b.arena = b.arena[:0] }

// Cap is the arena's size in bytes.
func (b *AcceptBuf) Cap() int { return cap(b.arena) }

// Result is AcceptedResult with the statement's bytes written into b.
func (b *AcceptBuf) Result(relay SigningKey, status string, a Accept) (PushResult, error) {
	if !plainAccept(&a) {
		return b.genericResult(relay, status, a)
	}
	if cap(b.input) == 0 {
		b.input = make([]byte, 0, acceptInputSize)
	}
	b.input = writeAcceptJSON(b.input[:0], &a, &acceptCanonicalOrder)
	sig := relay.Sign(b.input)
	start := len(b.arena)
	if need := 256 + 160*len(a.Targets); cap(b.arena)-start < need {
		// A new arena; the results written so far keep the old one.
		b.arena, start = make([]byte, 0, max(2*cap(b.arena), need)), 0
	}
	b.arena = writeAcceptJSON(b.arena, &a, &acceptStructOrder)
	raw := b.arena[start:len(b.arena):len(b.arena)]
	return PushResult{ItemID: a.ItemID, Status: status, Targets: resultTargets(a.Targets), Accept: raw, Sig: sig}, nil
}

// genericResult is Result for a statement only the generic encoders spell.
func (b *AcceptBuf) genericResult(relay SigningKey, status string, a Accept) (PushResult, error) {
	sig, err := SignAccept(relay, a)
	if err != nil {
		return PushResult{}, err
	}
	raw, err := MarshalJSON(a)
	if err != nil {
		return PushResult{}, fmt.Errorf("sign accept: %w", err)
	}
	return PushResult{ItemID: a.ItemID, Status: status, Targets: resultTargets(a.Targets), Accept: raw, Sig: sig}, nil
}

// resultTargets lists each target's seq.
func resultTargets(ts []AcceptTarget) []ResultTarget {
	targets := make([]ResultTarget, len(ts))
	for i, t := range ts {
		targets[i] = ResultTarget{HostPubkey: t.HostPubkey, Seq: t.Seq}
	}
	return targets
}

// RejectedResult is the push result for an item refused with code ("conflict", "rate",
// "quota:<which>", ...): status "rejected:<code>", no targets, no statement.
func RejectedResult(itemID, code string) PushResult {
	return PushResult{ItemID: itemID, Status: StatusRejectedPrefix + code, Targets: []ResultTarget{}}
}

// Rejected reports whether the result is a rejection, and its code.
func (r PushResult) Rejected() (code string, rejected bool) {
	return strings.CutPrefix(r.Status, StatusRejectedPrefix)
}

// ValidAccept is the sender's check of one push result: the item was accepted or is a duplicate,
// the statement is a relay-accept by the pinned relay key, for this sender and this item, with an
// entry for the expected target whose wire_hash is the hash of the bytes sent and whose seq is a
// safe integer, and the pinned relay key signed the statement as received. It returns the
// statement and the target's seq. Only a valid accept lets a row leave the active outbox.
func ValidAccept(r PushResult, pinnedRelay, ownPub, itemID, targetPub, wireHash string) (Accept, int64, error) {
	if (r.Status != StatusAccepted && r.Status != StatusDuplicate) || len(r.Accept) == 0 || r.Sig == "" {
		return Accept{}, 0, ErrAcceptStatus
	}
	m, ok := parseObject(r.Accept)
	if !ok {
		return Accept{}, 0, ErrAcceptMalformed
	}
	a := Accept{}
	if v, ok := getSafeInt(m, "v"); ok {
		a.V = int(v)
	}
	a.Type, _ = getString(m, "type")
	a.RelayPubkey, _ = getString(m, "relay_pubkey")
	a.Epoch, _ = getString(m, "epoch")
	a.SenderPubkey, _ = getString(m, "sender_pubkey")
	a.ItemID, _ = getString(m, "item_id")
	a.At, _ = getString(m, "at")
	switch {
	case a.Type != AcceptType:
		return Accept{}, 0, ErrAcceptMalformed
	case a.RelayPubkey != pinnedRelay || a.RelayPubkey == "":
		return Accept{}, 0, ErrAcceptRelayKey
	case a.SenderPubkey != ownPub || a.SenderPubkey == "":
		return Accept{}, 0, ErrAcceptSender
	case a.ItemID != itemID:
		return Accept{}, 0, ErrAcceptItem
	}
	arr, ok := m["targets"].([]any)
	if !ok {
		return Accept{}, 0, ErrAcceptMalformed
	}
	found := -1
	for _, e := range arr {
		tm, _ := e.(map[string]any)
		var t AcceptTarget
		t.HostPubkey, _ = getString(tm, "host_pubkey")
		t.WireHash, _ = getString(tm, "wire_hash")
		seq, safe := getSafeInt(tm, "seq")
		t.Seq = seq
		a.Targets = append(a.Targets, t)
		if found < 0 && tm != nil && tm["host_pubkey"] == targetPub {
			found = len(a.Targets) - 1
			if t.WireHash != wireHash {
				return Accept{}, 0, ErrAcceptWireHash
			}
			if !safe {
				return Accept{}, 0, ErrAcceptSeq
			}
		}
	}
	if found < 0 {
		return Accept{}, 0, ErrAcceptTarget
	}
	seq := a.Targets[found].Seq
	in, err := Canonical(m)
	if err != nil || !Verify(pinnedRelay, in, r.Sig) {
		return Accept{}, 0, ErrAcceptSignature
	}
	return a, seq, nil
}

// AtTime parses the statement's acceptance time (zero when it does not parse).
func (a Accept) AtTime() time.Time { t, _ := parseTime(a.At); return t }
