package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
)

// ErrNoDaemon is returned by Dial when no daemon listens on the home's control socket (the socket
// file is missing, or it is left over from a daemon that is gone). Commands answer it by opening
// the host store themselves.
var ErrNoDaemon = errors.New("no daemon running")

// Errors a request can come back with. An error answered by the daemon is an *Error whose code
// makes errors.Is match exactly one of these; a Service implementation returns (or wraps) them so
// that its callers on the far side of the socket see the same kind of error.
var (
	// ErrBadRequest is returned for input the service refuses as malformed or invalid (a bad
	// address, an empty body, an unknown flag value). Nothing was changed.
	ErrBadRequest = errors.New("bad request")
	// ErrNotFound is returned when the thing named does not exist (a message, an agent, a peer).
	ErrNotFound = errors.New("not found")
	// ErrConflict is returned when the request contradicts existing state (a different key under a
	// pinned peer name, a pairing session already open).
	ErrConflict = errors.New("conflict")
	// ErrRefused is returned when the request is well formed but not allowed (a card whose
	// signature fails, a wrong pairing code).
	ErrRefused = errors.New("refused")
	// ErrTooLarge is returned for a request body over the control socket's limit.
	ErrTooLarge = errors.New("request too large")
	// ErrUnavailable is returned when the service cannot answer now (shutting down, a store it
	// cannot open); retrying later may succeed.
	ErrUnavailable = errors.New("unavailable")
	// ErrTimeout is returned when the service gave up waiting on something it needed.
	ErrTimeout = errors.New("timed out")
	// ErrInternal is returned for a failure the service did not classify.
	ErrInternal = errors.New("internal error")
	// ErrProtocol is returned by the client when the daemon's answer cannot be understood (not
	// JSON, wrong shape): most likely a daemon of another version.
	ErrProtocol = errors.New("control socket protocol error")
)

// Error codes: the stable words in api.Error.Code. Each maps to one sentinel and one HTTP status.
const (
	CodeBadRequest  = "bad_request"
	CodeNotFound    = "not_found"
	CodeConflict    = "conflict"
	CodeRefused     = "refused"
	CodeTooLarge    = "too_large"
	CodeUnavailable = "unavailable"
	CodeTimeout     = "timeout"
	CodeInternal    = "internal"
)

// codes is the one place that ties a wire code to its sentinel and its status.
var codes = []struct {
	code     string
	sentinel error
	status   int
}{
	{CodeBadRequest, ErrBadRequest, http.StatusBadRequest},
	{CodeNotFound, ErrNotFound, http.StatusNotFound},
	{CodeConflict, ErrConflict, http.StatusConflict},
	{CodeRefused, ErrRefused, http.StatusForbidden},
	{CodeTooLarge, ErrTooLarge, http.StatusRequestEntityTooLarge},
	{CodeUnavailable, ErrUnavailable, http.StatusServiceUnavailable},
	{CodeTimeout, ErrTimeout, http.StatusGatewayTimeout},
	{CodeInternal, ErrInternal, http.StatusInternalServerError},
}

// Error is an error answered by the daemon: its message, its code and an optional hint for the
// person at the keyboard. errors.Is(err, ErrNotFound) and the like match it by code.
type Error struct {
	Message string // the service's error message
	Code    string // one of the Code constants (an unknown code from a newer daemon is kept as is)
	HintMsg string // what to do about it; may be empty
	Status  int    // the HTTP status the daemon answered with
}

func (e *Error) Error() string { return e.Message }

// Hint returns what to do about the error, or "".
func (e *Error) Hint() string { return e.HintMsg }

// Is reports whether target is the sentinel of the error's code.
func (e *Error) Is(target error) bool {
	for _, c := range codes {
		if c.code == e.Code {
			return target == c.sentinel
		}
	}
	return false
}

// Coder is implemented by errors that name their own wire code. The handler prefers it over the
// sentinels, so a service can classify its errors without wrapping this package's sentinels.
type Coder interface {
	Code() string
}

// CodeOf classifies err for the wire: the code of the first Coder in its chain, else the code of
// the first sentinel of this package it wraps, else timeout or unavailable for context errors,
// else internal.
func CodeOf(err error) string {
	var c Coder
	if errors.As(err, &c) && c.Code() != "" {
		return c.Code()
	}
	for _, c := range codes {
		if errors.Is(err, c.sentinel) {
			return c.code
		}
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return CodeTimeout
	case errors.Is(err, context.Canceled):
		return CodeUnavailable
	}
	return CodeInternal
}

// statusOf returns the HTTP status of a code (500 for codes this package does not know).
func statusOf(code string) int {
	for _, c := range codes {
		if c.code == code {
			return c.status
		}
	}
	return http.StatusInternalServerError
}

// codeOfStatus guesses a code from an HTTP status, for answers without an api.Error body.
func codeOfStatus(status int) string {
	for _, c := range codes {
		if c.status == status {
			return c.code
		}
	}
	switch {
	case status == http.StatusMethodNotAllowed, status == http.StatusUnsupportedMediaType:
		return CodeBadRequest
	case status >= 400 && status < 500:
		return CodeBadRequest
	}
	return CodeInternal
}

// hinted is an error with a hint, made by the client itself.
type hinted struct {
	err  error
	hint string
}

func (h *hinted) Error() string { return h.err.Error() }
func (h *hinted) Unwrap() error { return h.err }
func (h *hinted) Hint() string  { return h.hint }

// WithHint wraps err so that it carries a hint for a person: what to do about it (the CLI prints
// it on its own line). The hint is a format string with args.
func WithHint(err error, hint string, args ...any) error {
	return &hinted{err: err, hint: fmt.Sprintf(hint, args...)}
}
