package mbx

import (
	"crypto/ecdh"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
)

// SigningKey is an Ed25519 key pair: a host key or a relay key. Its String, Format and LogValue
// print only the fingerprint, so a key logged or wrapped in an error never leaks its seed.
type SigningKey struct {
	priv ed25519.PrivateKey
}

// GenerateSigningKey makes a new Ed25519 key from r (crypto/rand.Reader in production).
func GenerateSigningKey(r io.Reader) (SigningKey, error) {
	seed := make([]byte, ed25519.SeedSize)
	if _, err := io.ReadFull(r, seed); err != nil {
		return SigningKey{}, fmt.Errorf("generate signing key: %w", err)
	}
	return SigningKey{priv: ed25519.NewKeyFromSeed(seed)}, nil
}

// SigningKeyFromSeed loads a key from the base64 of its 32-byte seed (the private key form of the
// key files and of MBX_RELAY_KEY).
func SigningKeyFromSeed(seedB64 string) (SigningKey, error) {
	seed, err := DecodeB64Lenient(strings.TrimSpace(seedB64))
	if err != nil || len(seed) != ed25519.SeedSize {
		return SigningKey{}, fmt.Errorf("%w: expected a base64 32-byte Ed25519 private key", ErrBadKey)
	}
	return SigningKey{priv: ed25519.NewKeyFromSeed(seed)}, nil
}

// IsZero reports whether k holds no key.
func (k SigningKey) IsZero() bool { return len(k.priv) == 0 }

// PublicKey is the base64 of the raw 32-byte public key, as it travels on the wire.
func (k SigningKey) PublicKey() string { return B64(k.priv.Public().(ed25519.PublicKey)) }

// Seed is the base64 of the 32-byte seed. It is secret.
func (k SigningKey) Seed() string { return B64(k.priv.Seed()) }

// Fingerprint of the public key.
func (k SigningKey) Fingerprint() string { return Fingerprint(k.PublicKey()) }

// Sign returns the base64 Ed25519 signature of msg.
func (k SigningKey) Sign(msg []byte) string {
	var b [88]byte // the base64 of 64 bytes, encoded here so that only the string is allocated
	base64.StdEncoding.Encode(b[:], ed25519.Sign(k.priv, msg))
	return string(b[:])
}

// String prints the key's fingerprint, never its secret.
func (k SigningKey) String() string {
	if k.IsZero() {
		return "ed25519:none"
	}
	return fingerprintPrefix + k.Fingerprint()
}

// Format makes every fmt verb print String, so %#v cannot dump the seed.
func (k SigningKey) Format(f fmt.State, _ rune) { _, _ = io.WriteString(f, k.String()) }

// LogValue logs the fingerprint only.
func (k SigningKey) LogValue() slog.Value { return slog.StringValue(k.String()) }

// Verify reports whether sigB64 is a valid Ed25519 signature of msg by the key pubB64. Keys and
// signatures are decoded leniently, as the original implementation does; any error is false.
func Verify(pubB64 string, msg []byte, sigB64 string) bool {
	pub, err := DecodeB64Lenient(pubB64)
	if err != nil || len(pub) != ed25519.PublicKeySize {
		return false
	}
	sig, err := DecodeB64Lenient(sigB64)
	if err != nil || len(sig) != ed25519.SignatureSize {
		return false
	}
	return ed25519.Verify(ed25519.PublicKey(pub), msg, sig)
}

// ValidPublicKey reports whether s is a key as the protocol writes it: 44 characters of padded
// standard base64 decoding to 32 bytes.
//
// It decodes nothing: 43 characters of the standard alphabet and one "=", the last character
// before it carrying only zero padding bits (what a strict decoder demands), which is exactly
// what decodes to 32 bytes. Every hop and every pushed target is checked with it.
func ValidPublicKey(s string) bool {
	if len(s) != 44 || s[43] != '=' {
		return false
	}
	for i := range 43 {
		if b64Value(s[i]) < 0 {
			return false
		}
	}
	return b64Value(s[42])&3 == 0
}

// b64Value is the 6-bit value of c in the standard base64 alphabet, or -1.
func b64Value(c byte) int {
	switch {
	case 'A' <= c && c <= 'Z':
		return int(c - 'A')
	case 'a' <= c && c <= 'z':
		return int(c-'a') + 26
	case '0' <= c && c <= '9':
		return int(c-'0') + 52
	case c == '+':
		return 62
	case c == '/':
		return 63
	}
	return -1
}

// fingerprintPrefix is what a key's LogValue puts before its fingerprint.
const fingerprintPrefix = "ed25519:"

// Fingerprint is the short printable identity of a key: the first 16 lowercase hex digits of
// SHA-256 of the decoded key, in groups of four ("1a2b-3c4d-5e6f-7a8b"). Like the original it
// decodes leniently and does not check the length; undecodable text fingerprints its raw bytes.
func Fingerprint(pubB64 string) string {
	raw, err := DecodeB64Lenient(pubB64)
	if err != nil {
		raw = []byte(pubB64)
	}
	sum := sha256.Sum256(raw)
	h := hex.EncodeToString(sum[:8])
	return h[0:4] + "-" + h[4:8] + "-" + h[8:12] + "-" + h[12:16]
}

// ParseFingerprint reads a fingerprint leniently: a full base64 public key, or 16 hex digits in
// any case separated by '-', ':' or spaces (or not at all), with or without the "ed25519:" prefix
// that a key's LogValue prints (in any case). It returns the canonical form.
func ParseFingerprint(s string) (string, error) {
	s = strings.TrimSpace(s)
	if len(s) > len(fingerprintPrefix) && strings.EqualFold(s[:len(fingerprintPrefix)], fingerprintPrefix) {
		s = strings.TrimSpace(s[len(fingerprintPrefix):])
	}
	if ValidPublicKey(s) {
		return Fingerprint(s), nil
	}
	h := strings.Map(func(r rune) rune {
		switch r {
		case '-', ':', ' ':
			return -1
		}
		return r
	}, strings.ToLower(s))
	if len(h) != 16 {
		return "", fmt.Errorf("%w: want 16 hex digits or a base64 key", ErrBadFingerprint)
	}
	if _, err := hex.DecodeString(h); err != nil {
		return "", fmt.Errorf("%w: want 16 hex digits or a base64 key", ErrBadFingerprint)
	}
	return h[0:4] + "-" + h[4:8] + "-" + h[8:12] + "-" + h[12:16], nil
}

// EncKey is a static X25519 key pair used to seal envelope bodies for this host.
type EncKey struct {
	priv *ecdh.PrivateKey
}

// GenerateEncKey makes a new X25519 key from r.
func GenerateEncKey(r io.Reader) (EncKey, error) {
	raw := make([]byte, 32)
	if _, err := io.ReadFull(r, raw); err != nil {
		return EncKey{}, fmt.Errorf("generate enc key: %w", err)
	}
	return encKeyFromBytes(raw)
}

// EncKeyFromPrivate loads an X25519 key from the base64 of its 32 private bytes.
func EncKeyFromPrivate(b64 string) (EncKey, error) {
	raw, err := DecodeB64Lenient(strings.TrimSpace(b64))
	if err != nil || len(raw) != 32 {
		return EncKey{}, fmt.Errorf("%w: expected a base64 32-byte X25519 private key", ErrBadKey)
	}
	return encKeyFromBytes(raw)
}

func encKeyFromBytes(raw []byte) (EncKey, error) {
	priv, err := ecdh.X25519().NewPrivateKey(raw)
	if err != nil {
		return EncKey{}, fmt.Errorf("%w: X25519 private key", ErrBadKey)
	}
	return EncKey{priv: priv}, nil
}

// IsZero reports whether k holds no key.
func (k EncKey) IsZero() bool { return k.priv == nil }

// PublicKey is the base64 of the 32-byte X25519 public key.
func (k EncKey) PublicKey() string { return B64(k.priv.PublicKey().Bytes()) }

// Private is the base64 of the 32 private bytes. It is secret.
func (k EncKey) Private() string { return B64(k.priv.Bytes()) }

// SharedSecret is X25519(k, peer).
func (k EncKey) SharedSecret(peerPubB64 string) ([]byte, error) {
	raw, err := DecodeB64Lenient(peerPubB64)
	if err != nil || len(raw) != 32 {
		return nil, fmt.Errorf("%w: X25519 public key", ErrBadKey)
	}
	pub, err := ecdh.X25519().NewPublicKey(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: X25519 public key", ErrBadKey)
	}
	s, err := k.priv.ECDH(pub)
	if err != nil {
		return nil, fmt.Errorf("%w: X25519 shared secret", ErrBadKey)
	}
	return s, nil
}

// String prints the public key's fingerprint, never the secret.
func (k EncKey) String() string {
	if k.IsZero() {
		return "x25519:none"
	}
	return "x25519:" + Fingerprint(k.PublicKey())
}

// Format makes every fmt verb print String.
func (k EncKey) Format(f fmt.State, _ rune) { _, _ = io.WriteString(f, k.String()) }

// LogValue logs the fingerprint only.
func (k EncKey) LogValue() slog.Value { return slog.StringValue(k.String()) }

// KeyFile is the JSON form of host.key and enc.key: {"publicKey":"…","privateKey":"…"}.
type KeyFile struct {
	PublicKey  string `json:"publicKey"`
	PrivateKey string `json:"privateKey"`
}

// File is k in key-file form.
func (k SigningKey) File() KeyFile { return KeyFile{PublicKey: k.PublicKey(), PrivateKey: k.Seed()} }

// File is k in key-file form.
func (k EncKey) File() KeyFile { return KeyFile{PublicKey: k.PublicKey(), PrivateKey: k.Private()} }

// SigningKeyFromFile parses a host.key file and checks that its public key matches its private key.
func SigningKeyFromFile(data []byte) (SigningKey, error) {
	var f KeyFile
	if err := json.Unmarshal(data, &f); err != nil {
		return SigningKey{}, fmt.Errorf("%w: key file is not JSON", ErrBadKey)
	}
	k, err := SigningKeyFromSeed(f.PrivateKey)
	if err != nil {
		return SigningKey{}, err
	}
	if f.PublicKey != "" && f.PublicKey != k.PublicKey() {
		return SigningKey{}, fmt.Errorf("%w: key file public key does not match its private key", ErrBadKey)
	}
	return k, nil
}

// EncKeyFromFile parses an enc.key file and checks that its public key matches its private key.
func EncKeyFromFile(data []byte) (EncKey, error) {
	var f KeyFile
	if err := json.Unmarshal(data, &f); err != nil {
		return EncKey{}, fmt.Errorf("%w: key file is not JSON", ErrBadKey)
	}
	k, err := EncKeyFromPrivate(f.PrivateKey)
	if err != nil {
		return EncKey{}, err
	}
	if f.PublicKey != "" && f.PublicKey != k.PublicKey() {
		return EncKey{}, fmt.Errorf("%w: key file public key does not match its private key", ErrBadKey)
	}
	return k, nil
}
