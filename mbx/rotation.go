package mbx

import (
	"encoding/json"
	"fmt"
	"time"
)

// RotationSkew is how far a rotation record's iat may be ahead of the checker's clock.
const RotationSkew = 5 * time.Minute

// RotationRecord is a host key rotation: host moves from host key OldPub to NewPub and
// seals to NewEncPub from IAT on. Both keys sign its canonical JSON.
type RotationRecord struct {
	V         int    `json:"v"`
	Type      string `json:"type"`
	Host      string `json:"host"`
	OldPub    string `json:"old_pub"`
	NewPub    string `json:"new_pub"`
	NewEncPub string `json:"new_enc_pub"`
	IAT       string `json:"iat"`
}

// SignedRotation is a rotation record with the old key's and the new key's signatures. It is
// what POST /v2/relay/rotate carries (as RotateRequest) and what a rotated host sends its peers.
type SignedRotation struct {
	Rec    RotationRecord `json:"rec"`
	OldSig string         `json:"old_sig"`
	NewSig string         `json:"new_sig"`
}

// RotateRequest is the body of POST /v2/relay/rotate (no hop: the record authenticates itself).
type RotateRequest struct {
	Rotation json.RawMessage `json:"rotation"`
}

// RotateResponse is the relay's answer to a rotation: how many queued items moved to the new key.
type RotateResponse struct {
	Moved int64 `json:"moved"`
}

// SignRotation builds the rotation of host from old to next, sealing to newEncPub from now on,
// and signs it with both keys.
func SignRotation(host string, old, next SigningKey, newEncPub string, now time.Time) (SignedRotation, error) {
	rec := RotationRecord{V: 1, Type: "host-rotation", Host: host, OldPub: old.PublicKey(), NewPub: next.PublicKey(), NewEncPub: newEncPub, IAT: ISOTime(now)}
	if rec.OldPub == rec.NewPub {
		return SignedRotation{}, fmt.Errorf("sign rotation: %w", ErrRotationSameKey)
	}
	if !ValidPublicKey(newEncPub) {
		return SignedRotation{}, fmt.Errorf("sign rotation: %w", ErrRotationEncKey)
	}
	in, err := rec.SigningInput()
	if err != nil {
		return SignedRotation{}, fmt.Errorf("sign rotation: %w", err)
	}
	return SignedRotation{Rec: rec, OldSig: old.Sign(in), NewSig: next.Sign(in)}, nil
}

// SigningInput is the canonical JSON of the record, which both signatures cover.
func (r RotationRecord) SigningInput() ([]byte, error) { return Canonical(r) }

// IATTime parses the record's time (zero when it does not parse).
func (r RotationRecord) IATTime() time.Time { t, _ := parseTime(r.IAT); return t }

// parseRotation reads the shape of a signed rotation from JSON. It returns the typed record and
// the canonical JSON of rec exactly as received (which the signatures must cover).
func parseRotation(data []byte) (SignedRotation, []byte, error) {
	m, ok := parseObject(data)
	if !ok {
		return SignedRotation{}, nil, ErrRotationMalformed
	}
	rm, ok := m["rec"].(map[string]any)
	if !ok {
		return SignedRotation{}, nil, ErrRotationMalformed
	}
	var s SignedRotation
	r := &s.Rec
	var oks [8]bool
	r.Type, oks[0] = getString(rm, "type")
	r.Host, oks[1] = getString(rm, "host")
	r.IAT, oks[2] = getString(rm, "iat")
	r.OldPub, oks[3] = getString(rm, "old_pub")
	r.NewPub, oks[4] = getString(rm, "new_pub")
	r.NewEncPub, oks[5] = getString(rm, "new_enc_pub")
	s.OldSig, oks[6] = getString(m, "old_sig")
	s.NewSig, oks[7] = getString(m, "new_sig")
	if !isNumber(rm, "v", 1) || r.Type != "host-rotation" {
		return SignedRotation{}, nil, ErrRotationMalformed
	}
	for _, ok := range oks {
		if !ok {
			return SignedRotation{}, nil, ErrRotationMalformed
		}
	}
	r.V = 1
	in, err := Canonical(rm)
	if err != nil {
		return SignedRotation{}, nil, ErrRotationMalformed
	}
	return s, in, nil
}

// RotationOldPub returns rec.old_pub of a signed rotation's JSON, or "" when there is none: the
// key whose enrolment a relay looks up before checking the record.
func RotationOldPub(data []byte) string {
	m, _ := parseObject(data)
	rm, _ := m["rec"].(map[string]any)
	s, _ := getString(rm, "old_pub")
	return s
}

// CheckRotation checks a signed rotation (its JSON, as received) against the key the checker
// pinned for the host: the shape (ErrRotationMalformed), old_pub is pinned (ErrRotationNotPinned),
// new_pub differs (ErrRotationSameKey), old_sig verifies with old_pub (ErrRotationOldSig) and
// new_sig with new_pub (ErrRotationNewSig) over the record exactly as received, and new_enc_pub is
// a 32-byte key (ErrRotationEncKey). Fields the record type does not know are covered by the
// signatures but not returned.
func CheckRotation(data []byte, pinned string) (SignedRotation, error) {
	s, in, err := parseRotation(data)
	if err != nil {
		return SignedRotation{}, err
	}
	r := s.Rec
	if r.OldPub != pinned {
		return SignedRotation{}, ErrRotationNotPinned
	}
	if r.NewPub == r.OldPub {
		return SignedRotation{}, ErrRotationSameKey
	}
	if !Verify(r.OldPub, in, s.OldSig) {
		return SignedRotation{}, ErrRotationOldSig
	}
	if !Verify(r.NewPub, in, s.NewSig) {
		return SignedRotation{}, ErrRotationNewSig
	}
	if !ValidPublicKey(r.NewEncPub) {
		return SignedRotation{}, ErrRotationEncKey
	}
	return s, nil
}

// RelayCheckRotation is the relay's check of POST /v2/relay/rotate once it found the live
// enrolment of rec.old_pub (RotationOldPub; none answers 404): CheckRotation against the enrolled
// key, then the record must name the enrolment's host and a valid new host key (ErrRotationHost).
func RelayCheckRotation(data []byte, enrolledHost, enrolledPub string) (SignedRotation, error) {
	s, err := CheckRotation(data, enrolledPub)
	if err != nil {
		return SignedRotation{}, err
	}
	if s.Rec.Host != enrolledHost || !ValidPublicKey(s.Rec.NewPub) {
		return SignedRotation{}, ErrRotationHost
	}
	return s, nil
}
