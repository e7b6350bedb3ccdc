package mbx

import "errors"

// Errors of key handling. Messages never contain key material.
var (
	// ErrBadKey is returned when a key (public or private, Ed25519 or X25519) does not decode to 32
	// bytes or is otherwise unusable.
	ErrBadKey = errors.New("bad key")
	// ErrBadBase64 is returned when a value that must be base64 is not.
	ErrBadBase64 = errors.New("bad base64")
	// ErrBadFingerprint is returned by ParseFingerprint for text that is neither a key nor 16 hex digits.
	ErrBadFingerprint = errors.New("bad fingerprint")
)

// Errors of canonical JSON.
var (
	// ErrNonFinite is returned by Canonical for NaN and ±Inf, which JSON cannot carry.
	ErrNonFinite = errors.New("canonical: non-finite number")
	// ErrInvalidUTF8 is returned by Canonical for a string that is not valid UTF-8: the original
	// implementation signs UTF-16 text, and such a string has no faithful UTF-16 form.
	ErrInvalidUTF8 = errors.New("canonical: string is not valid UTF-8")
	// ErrBadJSON is returned when input that must be JSON is not.
	ErrBadJSON = errors.New("bad JSON")
	// ErrUnsupported is returned by Canonical for a Go value it cannot express as JSON.
	ErrUnsupported = errors.New("canonical: unsupported value")
)

// Errors of signed hops. Every hop failure wraps ErrBadHop, so a server maps them to one status.
var (
	// ErrBadHop is returned for a hop that is missing headers or whose signature does not verify.
	ErrBadHop = errors.New("bad hop")
	// ErrStaleHop is returned for a hop whose timestamp is outside the window or unparseable; it
	// wraps ErrBadHop.
	ErrStaleHop = errors.New("stale or bad hop timestamp (check clocks)")
)
