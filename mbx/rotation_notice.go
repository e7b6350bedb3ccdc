package mbx

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// Rotation notices (an addition of this implementation; 0.5.x has no relay-carried rotation).
//
// A host that rotates its key tells the peers it reaches only through the relay with one relay
// item per peer, pushed under its old key before the relay moves its queue. The item has kind
// "envelope", so any relay takes it (the relay checks that an envelope's wire is a JSON object
// whose "id" is the item id and whose "enc" is an object), and its wire is
//
//	{"v":1, "type":"host-rotation-notice", "id": item id, "enc": {v, alg, epk, nonce, body}}
//
// where enc is the signed rotation's JSON sealed to the peer's enc key exactly as an envelope
// body is (X25519 + HKDF-SHA256 + XChaCha20-Poly1305, bound to the item id). The sealed record
// authenticates itself (both keys signed it), so the notice carries no signature of its own; the
// relay hop that pushed it is signed by the old key. A 0.5.x receiver sees a malformed envelope
// and quarantines it, which changes nothing there.

// RotationNoticeType is the type field of a rotation notice.
const RotationNoticeType = "host-rotation-notice"

// ErrNotRotationNotice is returned by OpenRotationNotice for wire bytes that are not a rotation
// notice at all (an envelope, say).
var ErrNotRotationNotice = errors.New("not a rotation notice")

// RotationNoticeID is the relay item id of the notice of the rotation to newPub for the target
// host key target: the same for every push of it, so a repeated push is a relay duplicate.
func RotationNoticeID(newPub, target string) string {
	return "host-rotation:" + Fingerprint(newPub) + ":" + Fingerprint(target)
}

type rotationNotice struct {
	V    int         `json:"v"`
	Type string      `json:"type"`
	ID   string      `json:"id"`
	Enc  *noticeSeal `json:"enc"`
}

// noticeSeal is a sealed body on the wire, as an envelope's enc is.
type noticeSeal struct {
	V     int    `json:"v"`
	Alg   string `json:"alg"`
	EPK   string `json:"epk"`
	Nonce string `json:"nonce"`
	Body  string `json:"body"`
}

// SealRotationNotice returns the wire bytes of a rotation notice carrying signed (a signed
// rotation's JSON) sealed to recipientEncPub under item id itemID.
func SealRotationNotice(rand io.Reader, itemID string, signed []byte, recipientEncPub string) ([]byte, error) {
	enc, err := sealBody(rand, string(signed), recipientEncPub, itemID)
	if err != nil {
		return nil, fmt.Errorf("seal rotation notice: %w", err)
	}
	seal := &noticeSeal{V: 1, Alg: EncAlg, EPK: enc.EPK, Nonce: enc.Nonce, Body: enc.Body}
	return MarshalJSON(rotationNotice{V: 1, Type: RotationNoticeType, ID: itemID, Enc: seal})
}

// IsRotationNotice reports whether wire is shaped as a rotation notice (its type field).
func IsRotationNotice(wire []byte) bool {
	var n struct {
		Type string `json:"type"`
	}
	return json.Unmarshal(wire, &n) == nil && n.Type == RotationNoticeType
}

// OpenRotationNotice opens a rotation notice delivered as relay item itemID with the first of
// keys that opens it, and returns the signed rotation's JSON (still to be checked with
// CheckRotation). Wire bytes that are not a notice give ErrNotRotationNotice; a notice that names
// another id or that no key opens gives an error wrapping ErrUndecryptable or ErrBadRotation.
func OpenRotationNotice(wire []byte, itemID string, keys ...EncKey) ([]byte, error) {
	if !IsRotationNotice(wire) {
		return nil, ErrNotRotationNotice
	}
	var n rotationNotice
	if err := json.Unmarshal(wire, &n); err != nil || n.V != 1 || n.Enc == nil || n.Enc.V != 1 || n.Enc.Alg != EncAlg {
		return nil, fmt.Errorf("rotation notice: %w", ErrRotationMalformed)
	}
	if n.ID != itemID {
		return nil, fmt.Errorf("rotation notice: %w: id %.64q is not the item id", ErrRotationMalformed, n.ID)
	}
	lastErr := fmt.Errorf("rotation notice: %w: no enc key", ErrUndecryptable)
	for _, k := range keys {
		if k.IsZero() {
			continue
		}
		pt, err := OpenEnc(&Enc{EPK: n.Enc.EPK, Nonce: n.Enc.Nonce, Body: n.Enc.Body}, itemID, k)
		if err == nil {
			return []byte(pt), nil
		}
		lastErr = fmt.Errorf("rotation notice: %w", err)
	}
	return nil, lastErr
}
