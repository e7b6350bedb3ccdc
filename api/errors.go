package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
)

// Error codes: the stable words in Error.Code. Each maps to one sentinel and one HTTP status.
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

// The sentinels of the codes. An error answered over the control socket matches exactly one of
// them with errors.Is; a service returns (or wraps) them, or errors that name their code
// (Coder), so that its callers on the far side of the socket see the same kind of error.
var (
	// ErrBadRequest: input refused as malformed or invalid. Nothing was changed.
	ErrBadRequest = errors.New("bad request")
	// ErrNotFound: the thing named does not exist (a message, an agent, a peer).
	ErrNotFound = errors.New("not found")
	// ErrConflict: the request contradicts existing state (a different key under a pinned peer
	// name, a pairing session already open).
	ErrConflict = errors.New("conflict")
	// ErrRefused: well formed but not allowed (a card whose signature fails, a wrong pairing code).
	ErrRefused = errors.New("refused")
	// ErrTooLarge: a request body over the control socket's limit.
	ErrTooLarge = errors.New("request too large")
	// ErrUnavailable: the service cannot answer now (shutting down, a store it cannot open);
	// retrying later may succeed.
	ErrUnavailable = errors.New("unavailable")
	// ErrTimeout: the service gave up waiting on something it needed.
	ErrTimeout = errors.New("timed out")
	// ErrInternal: a failure the service did not classify.
	ErrInternal = errors.New("internal error")
)

// codes is the one place that ties a wire code to its sentinel and its HTTP status.
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

// Coder is implemented by errors that name their own wire code.
type Coder interface {
	Code() string
}

// ErrorCoder is implemented by a service that classifies its own errors for the wire: ErrorCode
// returns one of the Code constants for err, or "" to leave it to CodeOf.
type ErrorCoder interface {
	ErrorCode(err error) string
}

// CodeOf classifies err for the wire: the code of the first Coder in its chain, else the code of
// the first sentinel above it wraps, else timeout or unavailable for context errors, else
// internal.
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

// SentinelOf is the sentinel of a code, or nil for a code this package does not know.
func SentinelOf(code string) error {
	for _, c := range codes {
		if c.code == code {
			return c.sentinel
		}
	}
	return nil
}

// StatusOf is the HTTP status of a code (500 for codes this package does not know).
func StatusOf(code string) int {
	for _, c := range codes {
		if c.code == code {
			return c.status
		}
	}
	return http.StatusInternalServerError
}

// CodeOfStatus guesses a code from an HTTP status, for answers without an Error body.
func CodeOfStatus(status int) string {
	for _, c := range codes {
		if c.status == status {
			return c.code
		}
	}
	if status >= 400 && status < 500 {
		return CodeBadRequest
	}
	return CodeInternal
}

// CodedError is an error that names its wire code and says what a person can do about it. The
// host's and the pairing's sentinels are CodedErrors; match them with errors.Is.
type CodedError struct {
	msg, code, hint string
}

// NewError returns a CodedError with a code (one of the Code constants), a message and a hint
// ("" when there is nothing to add).
func NewError(code, msg, hint string) *CodedError {
	return &CodedError{msg: msg, code: code, hint: hint}
}

func (e *CodedError) Error() string { return e.msg }

// Code is the control-socket error code of the error.
func (e *CodedError) Code() string { return e.code }

// Hint says what to do about the error ("" when there is nothing to add).
func (e *CodedError) Hint() string { return e.hint }

// hinted is an error with a hint for a person.
type hinted struct {
	err  error
	hint string
}

func (h *hinted) Error() string { return h.err.Error() }
func (h *hinted) Unwrap() error { return h.err }
func (h *hinted) Hint() string  { return h.hint }

// WithHint wraps err so that it carries a hint for a person: what to do about it (the CLI prints
// it on its own line; the control socket answers it in Error.Hint). The hint is a format string
// with args.
func WithHint(err error, hint string, args ...any) error {
	return &hinted{err: err, hint: fmt.Sprintf(hint, args...)}
}
