package relayclient

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/hashicorp/go-retryablehttp"

	"github.com/agentmbx/agentmbx/internal/logkey"
	"github.com/agentmbx/agentmbx/mbx"
)

// Defaults of Options.
const (
	DefaultTimeout = 30 * time.Second // one request, not counting a long poll's wait
	// MaxWait caps the long-poll wait a Pull asks for.
	MaxWait = 60 * time.Second
)

// Caps on what the client reads of an answer.
const (
	maxSmallAnswer = 1 << 20  // info, enrolment, publications, ack, errors
	maxPushAnswer  = 8 << 20  // push results (a statement per item)
	maxPullAnswer  = 64 << 20 // a page: max_pull_bytes in base64 plus metadata
	maxEpochLen    = 256
	// maxRetentionDays bounds the retention a relay may announce: senders derive their deadlines
	// from it, so an absurd value would put off every unconfirmed alert (or overflow).
	maxRetentionDays = 365
)

// validEpoch reports whether a relay's epoch is usable: 1 to maxEpochLen bytes of text without
// control characters (the host stores epochs in records and listings).
func validEpoch(s string) bool {
	if s == "" || len(s) > maxEpochLen || !utf8.ValidString(s) {
		return false
	}
	return !strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) })
}

// Options configure a Client. A nil *Options means all defaults.
type Options struct {
	// HTTPClient sends the requests. Default: a client of its own that follows no redirects (a
	// signed hop is for one URL). A caller's client should not follow redirects either.
	HTTPClient *http.Client
	// Timeout bounds one request (DefaultTimeout when 0); a long poll gets its wait on top.
	Timeout time.Duration
	// Clock returns the current time for hop timestamps and record checks (default time.Now).
	Clock func() time.Time
	// UserAgent is sent with every request (default "agentmbx").
	UserAgent string
	// Logger receives a Warn when the relay key changes. Default: slog.Default().
	Logger *slog.Logger
	// RetryMax is how many times an idempotent request is retried inside one call (retry.go):
	// DefaultRetryMax when 0, none when negative.
	RetryMax int
	// RetryWait, when set, is the wait before retry n (1, 2, …) instead of the jittered
	// exponential one (the deterministic simulation, package sim, waits nothing).
	RetryWait func(n int) time.Duration
	// CA is a PEM bundle of CA certificates trusted for the relay's TLS certificate besides the
	// system roots (`relay set --ca`, a private CA). Ignored when HTTPClient is set. New and
	// Discover refuse a bundle without a certificate (ErrInvalid).
	CA []byte
}

type settings struct {
	hc       *http.Client
	timeout  time.Duration
	clock    func() time.Time
	ua       string
	log      *slog.Logger
	retryMax int
	wait     func(n int) time.Duration
}

func newSettings(opts *Options) (settings, error) {
	s := settings{timeout: DefaultTimeout, clock: time.Now, ua: "agentmbx", log: slog.Default(), retryMax: DefaultRetryMax}
	if opts != nil {
		if opts.RetryMax != 0 {
			s.retryMax = max(opts.RetryMax, 0)
		}
		s.hc = opts.HTTPClient
		s.wait = opts.RetryWait
		if opts.Timeout > 0 {
			s.timeout = opts.Timeout
		}
		if opts.Clock != nil {
			s.clock = opts.Clock
		}
		if opts.UserAgent != "" {
			s.ua = opts.UserAgent
		}
		if opts.Logger != nil {
			s.log = opts.Logger
		}
	}
	if s.hc == nil {
		var ca []byte
		if opts != nil {
			ca = opts.CA
		}
		hc, err := defaultHTTPClient(ca)
		if err != nil {
			return settings{}, err
		}
		s.hc = hc
	}
	return s, nil
}

func defaultHTTPClient(ca []byte) (*http.Client, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if len(ca) > 0 {
		pool, err := CertPool(ca)
		if err != nil {
			return nil, err
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	tr.TLSHandshakeTimeout = 10 * time.Second
	tr.MaxIdleConnsPerHost = 4
	return &http.Client{
		Transport:     tr,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}, nil
}

// CertPool is the system roots plus the CA certificates of the PEM bundle ca. A bundle without
// a certificate is refused (ErrInvalid).
func CertPool(ca []byte) (*x509.CertPool, error) {
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("relayclient: %w: the CA file holds no PEM certificate", ErrInvalid)
	}
	return pool, nil
}

// Client talks to one pinned relay as one host. It is safe for concurrent use.
type Client struct {
	pin  Pin
	host string
	key  mbx.SigningKey
	settings

	mu      sync.Mutex
	stopped error // a *KeyChangedError once the relay served another key
}

// New returns a Client for the relay pin, acting as host (its name) with its host key.
func New(pin Pin, host string, key mbx.SigningKey, opts *Options) (*Client, error) {
	if err := pin.Check(); err != nil {
		return nil, fmt.Errorf("relayclient: new: %w", err)
	}
	if key.IsZero() {
		return nil, fmt.Errorf("relayclient: new: %w: no host key", ErrInvalid)
	}
	if host == "" {
		return nil, fmt.Errorf("relayclient: new: %w: no host name", ErrInvalid)
	}
	st, err := newSettings(opts)
	if err != nil {
		return nil, fmt.Errorf("relayclient: new: %w", err)
	}
	return &Client{pin: pin, host: host, key: key, settings: st}, nil
}

// Pin returns the relay the Client talks to.
func (c *Client) Pin() Pin { return c.pin }

// Stopped returns the *KeyChangedError that stopped the Client, or nil while it works.
func (c *Client) Stopped() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stopped
}

// stop records that the relay served another key; every later call fails with it.
func (c *Client) stop(served string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped == nil {
		c.stopped = &KeyChangedError{URL: c.pin.URL, Pinned: c.pin.Fingerprint(), Served: mbx.Fingerprint(served)}
		c.log.Warn("relay key changed: relay use stopped", logkey.Relay, c.pin.URL,
			logkey.Pinned, c.pin.Fingerprint(), logkey.Served, mbx.Fingerprint(served))
	}
	return c.stopped
}

// request is one HTTP exchange with the relay.
type request struct {
	op      string
	method  string
	path    string // "/v2/relay/items?after=…", appended to the base URL
	body    []byte // nil for GET
	hop     bool   // sign with the host key
	max     int64  // the most bytes of answer to read
	timeout time.Duration
	// retry: the request is idempotent and no long poll, so a transport failure or a 5xx may be
	// retried inside it (retry.go).
	retry bool
}

// answer is a successful (2xx) answer.
type answer struct {
	status int
	body   []byte
	date   string // the Date header
	// retryAfter is the answer's Retry-After, when it has one (a long poll the relay did not
	// hold).
	retryAfter time.Duration
}

// send performs r (with retries when r.retry; retry.go). A 2xx answer is returned; any other is
// an error (*StatusError, *EpochError).
func send(ctx context.Context, s *settings, base string, r request, sign func(method, path string, body []byte) http.Header) (answer, error) {
	u, err := url.Parse(base + r.path)
	if err != nil {
		return answer{}, fmt.Errorf("relayclient: %s: %w: %v", r.op, ErrInvalid, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		// Refused here, not by the transport, so that no retry waits on a URL that cannot work.
		return answer{}, fmt.Errorf("relayclient: %s: %w: relay URL %q is not http or https", r.op, ErrInvalid, base)
	}
	timeout := r.timeout
	if timeout <= 0 {
		timeout = s.timeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var body any
	if r.body != nil {
		body = r.body
	}
	req, err := retryablehttp.NewRequestWithContext(ctx, r.method, u.String(), body)
	if err != nil {
		return answer{}, fmt.Errorf("relayclient: %s: %w: %v", r.op, ErrInvalid, err)
	}
	hop := func(hr *http.Request) error {
		if sign != nil {
			for k, v := range sign(r.method, mbx.RelaySignedPath(u), r.body) {
				hr.Header[k] = v
			}
		}
		return nil
	}
	_ = hop(req.Request)
	if r.body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", s.ua)
	retries := 0
	if r.retry {
		retries = s.retryMax
	}
	deadline, _ := ctx.Deadline()
	pol := &retryPolicy{deadline: deadline, now: time.Now, waitFn: s.wait}
	resp, err := retryClient(s.hc, retries, pol, hop).Do(req)
	if pol.attempt > 1 {
		s.log.Debug("relay request retried", logkey.Op, r.op, logkey.Attempts, pol.attempt)
	}
	if err != nil {
		return answer{}, transportError(r.op, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, r.max+1))
	if err != nil {
		return answer{}, fmt.Errorf("relayclient: %s: %w: reading the answer: %w", r.op, ErrTransport, err)
	}
	if int64(len(data)) > r.max {
		if resp.StatusCode/100 == 2 {
			return answer{}, fmt.Errorf("relayclient: %s: %w: answer over %d bytes", r.op, ErrProtocol, r.max)
		}
		data = data[:r.max]
	}
	if resp.StatusCode/100 != 2 {
		return answer{}, statusError(r.op, resp, data)
	}
	a := answer{status: resp.StatusCode, body: data, date: resp.Header.Get("Date")}
	if ra, ok := retryAfter(resp.Header.Get("Retry-After")); ok {
		a.retryAfter = ra
	}
	return a, nil
}

// statusError reads an error answer.
func statusError(op string, resp *http.Response, data []byte) error {
	var eb mbx.ErrorResponse
	_ = json.Unmarshal(data, &eb) // an error body that is not JSON still is an error status
	if resp.StatusCode == http.StatusConflict && (eb.Code == mbx.CodeEpoch || eb.Epoch != "") {
		if !validEpoch(eb.Epoch) {
			eb.Epoch = ""
		}
		return &EpochError{Op: op, Epoch: eb.Epoch}
	}
	se := &StatusError{Op: op, Status: resp.StatusCode, Message: clip(eb.Error, 300), Code: clip(eb.Code, 64),
		Epoch: clip(eb.Epoch, maxEpochLen), HeadSeq: eb.HeadSeq}
	if se.Message == "" && len(data) > 0 && eb.Error == "" && !json.Valid(data) {
		se.Message = clip(strings.TrimSpace(string(data)), 300)
	}
	if ra, ok := retryAfter(resp.Header.Get("Retry-After")); ok {
		se.RetryAfter = ra
	}
	return se
}

// clip cuts what the relay said to n bytes of printable text.
func clip(s string, n int) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, s)
	if len(s) > n {
		s = strings.ToValidUTF8(s[:n], "") + "…"
	}
	return s
}

// do sends r to the pinned relay, refusing to once the Client stopped.
func (c *Client) do(ctx context.Context, r request) (answer, error) {
	if err := c.Stopped(); err != nil {
		return answer{}, err
	}
	var sign func(method, path string, body []byte) http.Header
	if r.hop {
		sign = func(method, path string, body []byte) http.Header {
			return mbx.SignRelayHop(c.key, c.host, method, path, body, c.clock(), true)
		}
	}
	return send(ctx, &c.settings, c.pin.URL, r, sign)
}

// decode parses a 2xx answer into v, or fails with ErrProtocol.
func decode(op string, a answer, v any) error {
	if err := json.Unmarshal(a.body, v); err != nil {
		return fmt.Errorf("relayclient: %s: %w: %v", op, ErrProtocol, err)
	}
	return nil
}

// expectOK checks the {"ok":true} answer of a publication.
func expectOK(op string, a answer) error {
	var ok mbx.OKResponse
	if err := decode(op, a, &ok); err != nil {
		return err
	}
	if !ok.OK {
		return fmt.Errorf("relayclient: %s: %w: the answer does not say ok", op, ErrRefused)
	}
	return nil
}
