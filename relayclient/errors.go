package relayclient

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/agentmbx/agentmbx/mbx"
)

// The classes of failure. Every error a Client returns wraps exactly one of ErrTransport,
// ErrStatus, ErrProtocol or ErrInvalid (ErrRelayKeyChanged aside), so a caller decides what to do
// from the class, and from the specific errors below where one applies. Beyond the few retries
// inside an idempotent request (retry.go), retries are the caller's business; Retryable says
// where one can help.
var (
	// ErrTransport: no HTTP answer (connection refused or reset, DNS, TLS, timeout, a body cut
	// short). The request may or may not have taken effect.
	ErrTransport = errors.New("relay unreachable")
	// ErrStatus: the relay answered with an error status (the *StatusError says which, and the
	// relay's words). 4xx answers also wrap ErrRefused; some wrap a specific error below.
	ErrStatus = errors.New("relay answered an error")
	// ErrRefused: the relay understood the request and refused it: a 4xx answer, or a 2xx answer
	// that does not confirm (a publish without {"ok":true}). Retrying the same request will not
	// help, except after ErrRateLimited.
	ErrRefused = errors.New("relay refused the request")
	// ErrProtocol: the relay's answer breaks the protocol (not JSON, fields missing or of the
	// wrong type, a statement for something else). Nothing in it is trusted.
	ErrProtocol = errors.New("relay answer breaks the protocol")
	// ErrInvalid: the caller's input is unusable; nothing was sent.
	ErrInvalid = errors.New("invalid relay client input")
)

// Specific errors.
var (
	// ErrRelayKeyChanged: the relay served another relay key than the pinned one. The Client
	// stops: every later call fails with it too, until the owner pins the new key (a new Client).
	// The concrete error is a *KeyChangedError.
	ErrRelayKeyChanged = errors.New("relay key changed: relay use stopped until the owner confirms the new key")
	// ErrEpochChanged: the relay's epoch is not the one the request named (409). The concrete
	// error is an *EpochError carrying the current epoch.
	ErrEpochChanged = errors.New("relay epoch changed")
	// ErrRewound: the relay refused an ack beyond its head (BAD_ACK): its store went back in
	// time. Reset the receive position to 0 (docs/design.md: Receive checkpoint and ack).
	ErrRewound = errors.New("relay store went back in time (ack beyond its head)")
	// ErrNotEnrolled: the relay did not accept this host's hop (401): the key is not enrolled
	// (after a relay reset or restore), or the clocks differ by more than five minutes. Run
	// Enrol again (docs/design.md: Enrolment and publications).
	ErrNotEnrolled = errors.New("relay does not accept this host (not enrolled, or clock skew)")
	// ErrForbidden: the relay refuses this host key (403: revoked, or the enrolment authority
	// said no).
	ErrForbidden = errors.New("relay refuses this host key (revoked or denied)")
	// ErrRateLimited: too many requests (429); retry after StatusError.RetryAfter.
	ErrRateLimited = errors.New("relay rate limit")
	// ErrNotFound: the relay has no such thing (404): no enc-key ad for that host key, or, for
	// Discover, no v2 API at all (ErrV1Only).
	ErrNotFound = errors.New("relay has no such resource")
	// ErrV1Only: the relay answered 404 to GET /v2/relay/info: it speaks v1 only.
	ErrV1Only = errors.New("relay speaks v1 only")
	// ErrUntrustedCert: the relay's TLS certificate does not verify against the system roots (and
	// the CA given with Options.CA): an unknown or private CA, a name mismatch, an expired
	// certificate. Also wraps ErrTransport.
	ErrUntrustedCert = errors.New("relay's TLS certificate is not trusted")
	// ErrNoResult: a push answer has no result for an item (the item is not accepted).
	ErrNoResult = errors.New("relay answer has no result for the item")
)

// StatusError is an HTTP error answer of the relay.
type StatusError struct {
	Op     string // e.g. "pull"
	Status int    // the HTTP status
	// Message, Code, Epoch and HeadSeq are the relay's error body, where it had one.
	Message string
	Code    string
	Epoch   string
	HeadSeq *int64
	// RetryAfter is the Retry-After of a 429 or 503 (0 when absent).
	RetryAfter time.Duration
}

func (e *StatusError) Error() string {
	msg := fmt.Sprintf("relayclient: %s: relay answered %d %s", e.Op, e.Status, http.StatusText(e.Status))
	if e.Message != "" {
		msg += ": " + e.Message
	}
	return msg
}

// Unwrap returns ErrStatus, ErrRefused for a 4xx answer, and the specific error of the status.
func (e *StatusError) Unwrap() []error {
	errs := []error{ErrStatus}
	if e.Status >= 400 && e.Status < 500 && e.Status != http.StatusRequestTimeout {
		errs = append(errs, ErrRefused)
	}
	switch {
	case e.Status == http.StatusUnauthorized:
		errs = append(errs, ErrNotEnrolled)
	case e.Status == http.StatusForbidden:
		errs = append(errs, ErrForbidden)
	case e.Status == http.StatusNotFound:
		errs = append(errs, ErrNotFound)
	case e.Status == http.StatusTooManyRequests:
		errs = append(errs, ErrRateLimited)
	case e.Status == http.StatusBadRequest && e.Code == mbx.CodeBadAck:
		errs = append(errs, ErrRewound)
	}
	return errs
}

// EpochError is a 409 answer: the epoch the request named is not the relay's.
type EpochError struct {
	Op string
	// Epoch is the relay's current epoch ("" when its answer did not say).
	Epoch string
}

func (e *EpochError) Error() string {
	return fmt.Sprintf("relayclient: %s: %v: now %q", e.Op, ErrEpochChanged, e.Epoch)
}

// Unwrap returns ErrEpochChanged and ErrStatus.
func (e *EpochError) Unwrap() []error { return []error{ErrEpochChanged, ErrStatus} }

// KeyChangedError says which key the relay served instead of the pinned one (as fingerprints).
type KeyChangedError struct {
	URL    string
	Pinned string // fingerprint of the pinned key
	Served string // fingerprint of the served key
}

func (e *KeyChangedError) Error() string {
	return fmt.Sprintf("relayclient: %s: %v (pinned %s, served %s)", e.URL, ErrRelayKeyChanged, e.Pinned, e.Served)
}

// Unwrap returns ErrRelayKeyChanged.
func (e *KeyChangedError) Unwrap() error { return ErrRelayKeyChanged }

// Retryable reports whether retrying the same request later can help: a transport failure, a 5xx
// answer, 408 or 429. It is false for refusals, protocol violations, a changed relay key, bad
// input, and for epoch changes and rewinds (which need a reset first, not a retry).
func Retryable(err error) bool {
	if err == nil || errors.Is(err, ErrRelayKeyChanged) || errors.Is(err, ErrInvalid) {
		return false
	}
	if errors.Is(err, ErrTransport) {
		return true
	}
	var se *StatusError
	if errors.As(err, &se) {
		return se.Status >= 500 || se.Status == http.StatusTooManyRequests || se.Status == http.StatusRequestTimeout
	}
	return false
}
