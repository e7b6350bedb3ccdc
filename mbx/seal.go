package mbx

import (
	"crypto/cipher"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"unicode/utf8"

	"golang.org/x/crypto/chacha20poly1305"
	"golang.org/x/crypto/hkdf"
)

// encInfoPrefix starts the HKDF info of a sealed body; the envelope id follows, so a body sealed
// for one envelope does not open under another id.
const encInfoPrefix = "agentmbx-enc-1:"

// Seal seals e's body for one target host and host-signs the result, as the original's
// sealEnvelope does. It returns the sealed envelope and its wire bytes (also its Raw): the exact
// bytes to persist and push, once per target host. e itself is not changed and stays the local
// plaintext copy.
//
// Sealing: an ephemeral X25519 key (32 bytes from rand); shared = X25519(ephemeral, the target's
// enc key); key = HKDF-SHA256(shared, salt = ephemeral public key, info = "agentmbx-enc-1:" + id);
// a 24-byte nonce from rand; XChaCha20-Poly1305 over the UTF-8 body with no associated data. enc
// and the body field both carry the base64 ciphertext; the signature covers enc.body.
func (e *Envelope) Seal(rand io.Reader, recipientEncPub, host string, k SigningKey) (*Envelope, []byte, error) {
	if e.Enc != nil {
		return nil, nil, fmt.Errorf("seal envelope %s: %w", e.ID, ErrAlreadySealed)
	}
	if err := e.Check(); err != nil {
		return nil, nil, fmt.Errorf("seal envelope %s: %w", e.ID, err)
	}
	enc, err := sealBody(rand, e.Body, recipientEncPub, e.ID)
	if err != nil {
		return nil, nil, fmt.Errorf("seal envelope %s: %w", e.ID, err)
	}
	s := e.clone()
	s.Enc, s.Body, s.Sig = enc, enc.Body, nil
	if err := s.Sign(host, k); err != nil {
		return nil, nil, fmt.Errorf("seal envelope %s: %w", e.ID, err)
	}
	wire, err := s.Marshal()
	if err != nil {
		return nil, nil, fmt.Errorf("seal envelope %s: %w", e.ID, err)
	}
	s.raw = wire
	return s, wire, nil
}

func sealBody(rand io.Reader, body, recipientEncPub, id string) (*Enc, error) {
	eph, err := GenerateEncKey(rand)
	if err != nil {
		return nil, err
	}
	shared, err := eph.SharedSecret(recipientEncPub)
	if err != nil {
		return nil, fmt.Errorf("recipient enc key: %w", err)
	}
	epk := eph.priv.PublicKey().Bytes()
	aead, err := bodyAEAD(shared, epk, id)
	if err != nil {
		return nil, err
	}
	nonce := make([]byte, chacha20poly1305.NonceSizeX)
	if _, err := io.ReadFull(rand, nonce); err != nil {
		return nil, fmt.Errorf("seal nonce: %w", err)
	}
	ct := aead.Seal(nil, nonce, []byte(body), nil)
	return &Enc{EPK: B64(epk), Nonce: B64(nonce), Body: B64(ct)}, nil
}

// bodyAEAD derives the body key and returns its cipher.
func bodyAEAD(shared, epk []byte, id string) (cipher.AEAD, error) {
	key := make([]byte, chacha20poly1305.KeySize)
	if _, err := io.ReadFull(hkdf.New(sha256.New, shared, epk, []byte(encInfoPrefix+id)), key); err != nil {
		return nil, fmt.Errorf("derive body key: %w", err)
	}
	return chacha20poly1305.NewX(key)
}

// Open returns the plaintext body. For a plaintext envelope (no enc) it is e.Body. A sealed body is
// opened with each key in turn, the current enc key first and then the retired ones; when none
// opens it the error is ErrUndecryptable.
func (e *Envelope) Open(keys ...EncKey) (string, error) {
	if e.Enc == nil {
		return e.Body, nil
	}
	tried := 0
	for _, k := range keys {
		if k.IsZero() {
			continue
		}
		tried++
		if pt, err := OpenEnc(e.Enc, e.ID, k); err == nil {
			return pt, nil
		}
	}
	return "", fmt.Errorf("open envelope %s: %w: none of %d enc keys opens it", e.ID, ErrUndecryptable, tried)
}

// OpenEnc opens one sealed body with key, for the envelope id it was sealed under. The plaintext is
// decoded as the original's TextDecoder does: a leading byte order mark is dropped and invalid
// UTF-8 becomes U+FFFD.
func OpenEnc(enc *Enc, envelopeID string, key EncKey) (string, error) {
	fail := func(why string) (string, error) {
		return "", fmt.Errorf("open body: %w: %s", ErrUndecryptable, why)
	}
	if enc == nil {
		return fail("not sealed")
	}
	if key.IsZero() {
		return fail("no enc key")
	}
	if checkEnc(map[string]any{"v": jsOne, "alg": EncAlg, "epk": enc.EPK, "nonce": enc.Nonce, "body": enc.Body}) != nil {
		return fail("invalid enc body")
	}
	epk, err := DecodeB64Lenient(enc.EPK)
	if err != nil {
		return fail("invalid enc body")
	}
	nonce, err := DecodeB64Lenient(enc.Nonce)
	if err != nil {
		return fail("invalid enc body")
	}
	ct, err := DecodeB64Lenient(enc.Body)
	if err != nil {
		return fail("enc body is not base64")
	}
	shared, err := key.SharedSecret(enc.EPK)
	if err != nil {
		return fail("bad ephemeral key")
	}
	aead, err := bodyAEAD(shared, epk, envelopeID)
	if err != nil {
		return fail(err.Error())
	}
	pt, err := aead.Open(nil, nonce, ct, nil)
	if err != nil {
		return fail("invalid tag")
	}
	return decodeUTF8(pt), nil
}

// jsOne is the JSON number 1 as ParseJSON produces it.
const jsOne = json.Number("1")

// decodeUTF8 is the WHATWG UTF-8 decode (TextDecoder without fatal): a leading BOM is removed and
// each maximal ill-formed subsequence becomes one U+FFFD.
func decodeUTF8(b []byte) string {
	if len(b) >= 3 && b[0] == 0xEF && b[1] == 0xBB && b[2] == 0xBF {
		b = b[3:]
	}
	if utf8.Valid(b) {
		return string(b)
	}
	out := make([]byte, 0, len(b)+8)
	var cp rune
	needed, seen := 0, 0
	lower, upper := byte(0x80), byte(0xBF)
	for i := 0; i < len(b); i++ {
		c := b[i]
		if needed == 0 {
			switch {
			case c <= 0x7F:
				out = append(out, c)
			case c >= 0xC2 && c <= 0xDF:
				needed, cp = 1, rune(c&0x1F)
			case c >= 0xE0 && c <= 0xEF:
				if c == 0xE0 {
					lower = 0xA0
				} else if c == 0xED {
					upper = 0x9F
				}
				needed, cp = 2, rune(c&0x0F)
			case c >= 0xF0 && c <= 0xF4:
				if c == 0xF0 {
					lower = 0x90
				} else if c == 0xF4 {
					upper = 0x8F
				}
				needed, cp = 3, rune(c&0x07)
			default:
				out = utf8.AppendRune(out, utf8.RuneError)
			}
			continue
		}
		if c < lower || c > upper {
			cp, needed, seen = 0, 0, 0
			lower, upper = 0x80, 0xBF
			out = utf8.AppendRune(out, utf8.RuneError)
			i-- // the byte starts over
			continue
		}
		lower, upper = 0x80, 0xBF
		cp = cp<<6 | rune(c&0x3F)
		seen++
		if seen == needed {
			out = utf8.AppendRune(out, cp)
			cp, needed, seen = 0, 0, 0
		}
	}
	if needed != 0 {
		out = utf8.AppendRune(out, utf8.RuneError)
	}
	return string(out)
}

// Receive runs a receiving host's checks, in the original's order, on envelope bytes that came
// from the paired host via whose pinned key is pubB64: the shape (ErrBadEnvelope), the sending
// host and the signature (ErrSenderMismatch, ErrBadSignature), then the body is opened with keys,
// the current enc key first (ErrUndecryptable). It returns the stored form: body in plaintext,
// enc kept (the signature covers enc.body, so the stored form still verifies) and Raw the bytes
// received.
func Receive(wire []byte, via, pubB64 string, keys ...EncKey) (*Envelope, error) {
	e, err := ParseEnvelope(wire)
	if err != nil {
		return nil, fmt.Errorf("receive envelope from %s: %w", via, err)
	}
	if err := e.Verify(via, pubB64); err != nil {
		return nil, fmt.Errorf("receive envelope from %s: %w", via, err)
	}
	if e.Enc == nil {
		return e, nil
	}
	pt, err := e.Open(keys...)
	if err != nil {
		return nil, fmt.Errorf("receive envelope from %s: %w", via, err)
	}
	raw := e.raw
	stored := e.clone()
	stored.Body, stored.raw = pt, raw
	return stored, nil
}
