package mbx

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"strings"
)

// B64 encodes b as standard base64 with padding, the encoding of every binary value on the wire.
func B64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

// DecodeB64Lenient decodes s the way Node's Buffer.from(s, "base64") does for well-formed input:
// the standard and the URL-safe alphabets are both accepted, and padding is optional. The original
// implementation decodes signatures and keys this way, so verification must too. Unlike Node it
// refuses characters outside both alphabets instead of skipping them.
func DecodeB64Lenient(s string) ([]byte, error) {
	s = strings.TrimRight(s, "=")
	if strings.ContainsAny(s, "-_") {
		s = strings.NewReplacer("-", "+", "_", "/").Replace(s)
	}
	if len(s)%4 == 1 {
		// A single trailing character carries fewer than 8 bits; Node drops it.
		s = s[:len(s)-1]
	}
	if strings.ContainsAny(s, "\r\n") {
		return nil, ErrBadBase64
	}
	// The non-strict decoder ignores non-zero trailing bits, as Node does.
	b, err := base64.RawStdEncoding.DecodeString(s)
	if err != nil {
		return nil, ErrBadBase64
	}
	return b, nil
}

// SHA256Hex is the lowercase hex SHA-256 of b (wire hashes, hop body hashes).
func SHA256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	var h [2 * sha256.Size]byte // encoded here so that only the string is allocated
	hex.Encode(h[:], sum[:])
	return string(h[:])
}
