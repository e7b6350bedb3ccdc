package quarantine

import "errors"

// Errors of Open.
var (
	// ErrSchema is returned by Open when the bucket was written by a newer binary.
	ErrSchema = errors.New("quarantine: store schema is newer than this binary")
	// ErrNoBuckets is returned when the quarantine bucket is missing from a read-only database
	// (Open was never run on it with write access).
	ErrNoBuckets = errors.New("quarantine: bucket missing (call quarantine.Open on this database first)")
)

// Errors of the operations of a Tx. Each is returned before anything was written.
var (
	// ErrInvalid is returned for bad input: an empty relay or epoch, a seq that is not positive,
	// an unknown cause, a field over its size limit. The message says which.
	ErrInvalid = errors.New("invalid quarantine input")
	// ErrNotFound is returned by Get when no entry has the given position.
	ErrNotFound = errors.New("no such quarantine entry")
	// ErrReadOnly is returned when a mutating operation is given a read-only transaction.
	ErrReadOnly = errors.New("quarantine: read-only transaction")
	// ErrCorrupt is returned when a stored entry or index cannot be decoded.
	ErrCorrupt = errors.New("quarantine: corrupt store")
)
