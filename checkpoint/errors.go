package checkpoint

import "errors"

// Errors of Open.
var (
	// ErrSchema is returned by Open when the bucket was written by a newer binary.
	ErrSchema = errors.New("checkpoint: store schema is newer than this binary")
	// ErrNoBuckets is returned when the positions bucket is missing from a read-only database.
	ErrNoBuckets = errors.New("checkpoint: bucket missing (call checkpoint.Open on this database first)")
)

// Errors of the operations. Each is returned before anything was written, except ErrHandler (see
// there).
var (
	// ErrInvalid is returned for bad input: an empty relay or epoch, a negative cursor, a
	// verdict that is not one of the three, a rejection without a cause.
	ErrInvalid = errors.New("invalid checkpoint input")
	// ErrStalePage is returned by ProcessPage for a page pulled after a position beyond the
	// committed received_through (another pull moved on, or the position was reset since):
	// processing it would skip items. Nothing changes; pull again from Position.
	ErrStalePage = errors.New("checkpoint: page starts beyond the receive position")
	// ErrHandler wraps an error a Handler returned. ProcessPage commits the items before the
	// failing one (with the position moved over them) and nothing of the failing one or after it;
	// the Result says how far it got. Pull again and retry later.
	ErrHandler = errors.New("checkpoint: handler failed")
	// ErrReadOnly is returned when a mutating operation is given a read-only transaction.
	ErrReadOnly = errors.New("checkpoint: read-only transaction")
	// ErrCorrupt is returned when a stored position cannot be decoded.
	ErrCorrupt = errors.New("checkpoint: corrupt store")
)
