package client

import (
	"errors"

	"github.com/agentmbx/agentmbx/api"
)

// ErrNoDaemon is returned by Dial when no daemon listens on the home's control socket (the socket
// file is missing, or it is left over from a daemon that is gone). Commands answer it by opening
// the host store themselves.
var ErrNoDaemon = errors.New("no daemon running")

// ErrProtocol is returned when the daemon's answer cannot be understood (not JSON, wrong shape):
// most likely a daemon of another version.
var ErrProtocol = errors.New("control socket protocol error")

// The errors a request can come back with: the api package's sentinels, here too so that an SDK
// user needs one import. An *Error answered by the daemon matches exactly one of them.
var (
	ErrBadRequest  = api.ErrBadRequest
	ErrNotFound    = api.ErrNotFound
	ErrConflict    = api.ErrConflict
	ErrRefused     = api.ErrRefused
	ErrTooLarge    = api.ErrTooLarge
	ErrUnavailable = api.ErrUnavailable
	ErrTimeout     = api.ErrTimeout
	ErrInternal    = api.ErrInternal
)

// Error is an error answered by the daemon: its message, its code and an optional hint for the
// person at the keyboard. errors.Is(err, ErrNotFound) and the like match it by code.
type Error struct {
	Message string // the service's error message
	Code    string // one of the api Code constants (an unknown code from a newer daemon is kept as is)
	HintMsg string // what to do about it; may be empty
	Status  int    // the HTTP status the daemon answered with
}

func (e *Error) Error() string { return e.Message }

// Hint returns what to do about the error, or "".
func (e *Error) Hint() string { return e.HintMsg }

// Is reports whether target is the sentinel of the error's code.
func (e *Error) Is(target error) bool {
	s := api.SentinelOf(e.Code)
	return s != nil && target == s
}

// WithHint wraps err so that it carries a hint for a person: what to do about it (the CLI prints
// it on its own line). The hint is a format string with args.
func WithHint(err error, hint string, args ...any) error { return api.WithHint(err, hint, args...) }
