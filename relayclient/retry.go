package relayclient

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-retryablehttp"
)

// Retries inside one request (github.com/hashicorp/go-retryablehttp). Only idempotent requests
// are retried: info, challenge, enrol, the publications, a pull without a wait, ack, and push
// (idempotent by the relay's dedup of item ids). Every retry fits inside the request's own
// timeout: a retry whose wait would pass the deadline is not made, so a caller sees the last
// answer, not a context error. What must reach the caller is never retried: a 429 (the link
// pause handles it), any other 4xx, a 503 whose Retry-After is longer than maxInlineRetryAfter
// (the link pause honours it), a long poll (the pull loop pulls again), a refused certificate.
const (
	// DefaultRetryMax is how many times an idempotent request is retried at most.
	DefaultRetryMax = 2
	// retryWaitMin and retryWaitMax bound the jittered exponential wait between attempts.
	retryWaitMin = 200 * time.Millisecond
	retryWaitMax = 2 * time.Second
	// maxInlineRetryAfter is the longest Retry-After waited for inside a request.
	maxInlineRetryAfter = 2 * time.Second
)

// retryPolicy decides the retries of one request; it lives as long as the request.
type retryPolicy struct {
	deadline time.Time // the request's deadline (zero: none)
	now      func() time.Time
	attempt  int                       // attempts made so far
	wait     time.Duration             // the wait before the next attempt, decided by check
	waitFn   func(n int) time.Duration // Options.RetryWait (nil: jittered)
}

// check is the retryablehttp.CheckRetry: retry a transport failure or a 500, 502, 503 or 504,
// when the wait before the next attempt still fits before the deadline.
func (p *retryPolicy) check(ctx context.Context, resp *http.Response, err error) (bool, error) {
	p.attempt++
	if ctx.Err() != nil {
		return false, nil
	}
	var after time.Duration
	if err != nil {
		if !retryableTransport(err) {
			return false, nil
		}
	} else {
		switch resp.StatusCode {
		case http.StatusInternalServerError, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		default:
			return false, nil
		}
		if ra, ok := retryAfter(resp.Header.Get("Retry-After")); ok {
			if ra > maxInlineRetryAfter {
				return false, nil // the caller honours it for the whole link
			}
			after = ra
		}
	}
	if p.waitFn != nil {
		p.wait = p.waitFn(p.attempt)
	} else {
		p.wait = max(after, jittered(p.attempt))
	}
	if !p.deadline.IsZero() && p.now().Add(p.wait).After(p.deadline) {
		return false, nil
	}
	return true, nil
}

// backoff is the retryablehttp.Backoff: the wait check decided.
func (p *retryPolicy) backoff(_, _ time.Duration, _ int, _ *http.Response) time.Duration {
	return p.wait
}

// jittered is the wait before retry n (1, 2, …): retryWaitMin·2^(n-1), at most retryWaitMax, and
// between half and all of that at random.
func jittered(n int) time.Duration {
	d := retryWaitMin << min(max(n-1, 0), 10)
	d = min(d, retryWaitMax)
	return d/2 + rand.N(d/2+1) //nolint:gosec // G404: jitter spreads retries; it guards no secret
}

// retryableTransport reports whether a failure without an answer may pass on a retry: not a
// refused certificate (send refuses a URL that is not http or https before any attempt).
func retryableTransport(err error) bool {
	return !errors.Is(transportError("", err), ErrUntrustedCert)
}

// retryAfter reads a Retry-After of whole seconds.
func retryAfter(v string) (time.Duration, bool) {
	secs, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || secs < 0 {
		return 0, false
	}
	return time.Duration(min(secs, 24*3600)) * time.Second, true
}

// retryClient returns the retryablehttp client of one request: hc underneath, no logger (the
// library's logs would name URLs and errors outside our redaction; attempts are logged at Debug
// by the caller, without headers or bodies), the last answer passed through as it came, and
// resign refreshing the hop before each retry.
func retryClient(hc *http.Client, retries int, p *retryPolicy, resign func(*http.Request) error) *retryablehttp.Client {
	return &retryablehttp.Client{
		HTTPClient:   hc,
		Logger:       nil,
		RetryWaitMin: retryWaitMin,
		RetryWaitMax: retryWaitMax,
		RetryMax:     retries,
		CheckRetry:   p.check,
		Backoff:      p.backoff,
		ErrorHandler: retryablehttp.PassthroughErrorHandler,
		PrepareRetry: resign,
	}
}
