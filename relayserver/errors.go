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
	// ErrBadBackup is returned by a restore of a file that is not a relay store.
	ErrBadBackup = errors.New("not a relay store backup")
	// ErrRelayKeyMismatch is returned when the relay key is not the one the store belongs to.
	ErrRelayKeyMismatch = errors.New("relay key does not match the store")
	// ErrNameTaken is returned when a live enrolment of the same account already has the name.
	ErrNameTaken = errors.New("host name is taken in this account")
	// ErrDuplicate is returned by InsertItem for a (sender, item id, target) that exists.
	ErrDuplicate = errors.New("item already stored for this target")
	// ErrBadAck is returned by Ack for a through beyond the head.
	ErrBadAck = errors.New("ack beyond the head of the queue")
	// ErrStoreFull is wrapped (with ErrCommit) by the error of a write that failed because the
	// store's disk is full.
	ErrStoreFull = errors.New("store disk is full")
	// ErrRevoked is returned for a host key that is revoked.
	ErrRevoked = errors.New("host key is revoked")
)

// Errors of the relay's API. httperr.go maps each to its HTTP status and body.
var (
	// ErrBadRequest is returned for a body or query that is malformed: not JSON, a field of the
	// wrong type, bad base64, an unknown kind, too many items or targets.
	ErrBadRequest = errors.New("bad request")
	// ErrTooLarge is returned when a body is over its cap; nothing is stored.
	ErrTooLarge = errors.New("request body too large")
	// ErrNotEnrolled is returned for a validly signed hop by a key the relay does not know.
	ErrNotEnrolled = errors.New("not enrolled")
	// ErrRateLimited is returned when a client address or sender key is over its rate.
	ErrRateLimited = errors.New("rate limited")
	// ErrStaleEpoch is returned when the request names an epoch that is not current.
	ErrStaleEpoch = errors.New("epoch is not current")
	// ErrRelayFull is returned when the relay holds as many live enrolments as it may.
	ErrRelayFull = errors.New("relay has no room for more enrolments")
	// ErrBusy is returned, before a body is read, when the relay's budget of body bytes in flight
	// or the client address's share of requests in flight is spent: 503 with Retry-After.
	ErrBusy = errors.New("relay busy, retry later")
	// ErrDenied is returned when the enrolment authority refuses a host.
	ErrDenied = errors.New("enrolment denied")
	// ErrStaleRecord is returned for a signed record older than the one stored.
	ErrStaleRecord = errors.New("a newer record is stored")
	// ErrKeyFileMode is returned for a relay.key that group or others may read.
	ErrKeyFileMode = errors.New("relay key file is readable by group or others")
	// ErrBadKey is returned for a relay key that cannot be loaded. It never carries key material.
	ErrBadKey = errors.New("bad relay key")
)
