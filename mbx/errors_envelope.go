package mbx

import "errors"

// Errors of envelopes, grouped by the stage of reception that returns them. A receiving host checks
// the shape first, then the sending host, then the signature, then opens the body; each stage has
// its own sentinel, so the host maps them to its answers in one place:
//
//	ErrBadEnvelope     → rejected:<ShapeError.Reason>
//	ErrSenderMismatch  → rejected:sender host mismatch
//	ErrBadSignature    → rejected:bad signature
//	ErrUndecryptable   → rejected:undecryptable body
var (
	// ErrBadEnvelope is returned when bytes or a value are not a well-formed v3 envelope: not JSON,
	// a field missing or of the wrong type, a limit exceeded. The error is a *ShapeError naming the
	// field.
	ErrBadEnvelope = errors.New("bad envelope")
	// ErrSenderMismatch is returned by Verify when sig.host or the host part of from is not the host
	// the envelope came from.
	ErrSenderMismatch = errors.New("sender host mismatch")
	// ErrBadSignature is returned by Verify when the host signature is missing, names another
	// algorithm or key, or does not verify over the envelope as received.
	ErrBadSignature = errors.New("bad signature")
	// ErrUndecryptable is returned by Open when no key opens the sealed body: wrong key, another
	// envelope id, tampered ciphertext or nonce, or a malformed enc.
	ErrUndecryptable = errors.New("undecryptable body")
)

// Errors of building and sealing envelopes on the sending side.
var (
	// ErrBadDraft is returned by Build for input the original refuses too: an empty subject, a body
	// over 256 KiB, no recipient; and for a draft whose envelope would fail the shape check.
	ErrBadDraft = errors.New("bad draft")
	// ErrAlreadySealed is returned by Seal for an envelope whose enc is set: a sealed envelope is
	// sent as the bytes first produced, never sealed again.
	ErrAlreadySealed = errors.New("envelope already sealed")
)

// ErrBadAddress is returned by ParseAddress for text that is none of the address forms.
var ErrBadAddress = errors.New("bad address")

// ShapeError says which field of an envelope is malformed. Reason is the original implementation's
// own text for the refusal (what its receiver answers after "rejected:"), Field the JSON path of
// the field ("subject", "enc.nonce", "meta.hop").
type ShapeError struct {
	Field  string
	Reason string
}

func (e *ShapeError) Error() string { return "bad envelope: " + e.Field + ": " + e.Reason }

// Unwrap makes every ShapeError match ErrBadEnvelope.
func (e *ShapeError) Unwrap() error { return ErrBadEnvelope }
