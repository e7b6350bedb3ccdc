package relayserver

import "errors"

// Errors of the store. Backends return these (wrapped with the operation) so the relay core and
// the HTTP mapping in httperr.go can tell them apart without knowing the backend.
var (
	// ErrNotFound is returned by lookups of a key, list, ad or dedup row that does not exist.
	ErrNotFound = errors.New("not found")
	// ErrCommit is wrapped by every error of a failed shared commit: nothing of the unit is stored.
	ErrCommit = errors.New("store commit failed")
	// ErrClosed is returned by a store that is closed or closing.
	ErrClosed = errors.New("store is closed")
	// ErrLocked is returned by Open when another process holds the store.
	ErrLocked = errors.New("store is in use by another process")
	// ErrSchemaTooNew is returned by Open for a store written by a newer binary.
	ErrSchemaTooNew = errors.New("store schema is newer than this binary")
	// ErrRelayKeyMismatch is returned when the relay key is not the one the store belongs to.
	ErrRelayKeyMismatch = errors.New("relay key does not match the store")
	// ErrNameTaken is returned when a live enrolment of the same account already has the name.
	ErrNameTaken = errors.New("host name is taken in this account")
	// ErrDuplicate is returned by InsertItem for a (sender, item id, target) that exists.
	ErrDuplicate = errors.New("item already stored for this target")
	// ErrBadAck is returned by Ack for a through beyond the head.
	ErrBadAck = errors.New("ack beyond the head of the queue")
	// ErrRevoked is returned for a host key that is revoked.
	ErrRevoked = errors.New("host key is revoked")
)
