package outbox

import (
	"errors"
	"fmt"
)

// Errors returned by Open.
var (
	// ErrSchema is returned by Open when the store was written by a newer binary (its schema
	// version is higher than this package knows).
	ErrSchema = errors.New("outbox: store schema is newer than this binary")
)

// Errors returned by the operations of a Tx (and the Store wrappers around them). Every one of
// them is returned before anything was written: the transaction is unchanged and the caller may
// go on using it.
var (
	// ErrNotFound is returned when no row has the given key.
	ErrNotFound = errors.New("no such outbox row")
	// ErrExists is returned by Add when a row with the same (item id, host) already exists.
	// The existing row is left as it is (its wire bytes are never replaced).
	ErrExists = errors.New("outbox row already exists")
	// ErrTransition is returned when an operation does not apply to the row's current state (for
	// example settling a row that is already rejected, or a LAN attempt on a relay-accepted row).
	// The concrete error is a *TransitionError.
	ErrTransition = errors.New("illegal outbox transition")
	// ErrInvalid is returned for bad input: an empty or malformed host, item id, host key, relay,
	// epoch, statement, an empty or oversized wire, a zero time. The message says which.
	ErrInvalid = errors.New("invalid outbox input")
	// ErrReadOnly is returned when a mutating operation is given a read-only transaction.
	ErrReadOnly = errors.New("outbox: read-only transaction")
	// ErrNoBuckets is returned when the database has no outbox buckets (Open was never run on
	// it).
	ErrNoBuckets = errors.New("outbox: buckets missing (call outbox.Open on this database first)")
)

// Errors returned by Tx.Check and when stored data cannot be read.
var (
	// ErrCorrupt is returned when a stored row cannot be decoded, or when Check finds an index
	// that disagrees with the rows.
	ErrCorrupt = errors.New("outbox: corrupt store")
)

// TransitionError says which operation was refused on which row in which state. It unwraps to
// ErrTransition.
type TransitionError struct {
	Op    string // the operation, e.g. "mark delivered"
	Key   Key    // the row
	From  State  // the row's state
	Cause string // why, when the state alone does not say it (e.g. "lan attempt on a relay-accepted row")
}

func (e *TransitionError) Error() string {
	msg := fmt.Sprintf("outbox: %s %s: %s from %s", e.Op, e.Key, ErrTransition, e.From)
	if e.Cause != "" {
		msg += ": " + e.Cause
	}
	return msg
}

// Unwrap returns ErrTransition.
func (e *TransitionError) Unwrap() error { return ErrTransition }
