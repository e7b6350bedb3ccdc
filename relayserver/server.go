package relayserver

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/agentmbx/agentmbx/mbx"
)

// Failpoints of the HTTP layer (see package failpoint).
const (
	// FailAfterCommitBeforeResponse fires after a push committed, before its response is written.
	FailAfterCommitBeforeResponse = "relay.after-commit-before-response"
)

// Options configure a Server. Zero fields take the 0.5.x defaults.
type Options struct {
	// Key is the relay's identity. Required.
	Key mbx.SigningKey
	// Limits announced in /v2/relay/info and enforced. Zero: mbx.DefaultLimits().
	Limits mbx.Limits
	// MaxBody caps request bodies (checked while streaming). Default mbx.RelayMaxBody.
	MaxBody int64
	// MaxSmallBody caps challenge, enrol and rotate bodies. Default mbx.RelaySmallBodyMax.
	MaxSmallBody int64
	// EnrolCallsPerMinute limits challenge, enrol and rotate calls per client address.
	// Default mbx.EnrolCallsPerMinute; negative disables.
	EnrolCallsPerMinute int
	// PushesPerMinute limits push requests per sender key. Default mbx.PushesPerMinute;
	// negative disables.
	PushesPerMinute int
	// RateTableMax caps the keys each rate table remembers. Default 10,000.
	RateTableMax int
	// MaxEnrolments caps live enrolments. Default mbx.MaxEnrolments.
	MaxEnrolments int64
	// MaxChallenges caps open challenges. Default mbx.MaxPendingChallenges.
	MaxChallenges int
	// MaxWait caps the long-poll wait of a pull (GET /v2/relay/items?wait=seconds); longer waits
	// are cut to it, and /v2/relay/info announces it as limits.max_wait. Default DefaultMaxWait;
	// negative disables long polling (every pull answers at once).
	MaxWait time.Duration
	// MaxWaiting caps the pulls parked at once (default DefaultMaxWaiting); past it a pull answers
	// at once. MaxWaitingPerKey caps them per host key (default DefaultMaxWaitingPerKey); a newer
	// pull of the key evicts its oldest, which answers at once.
	MaxWaiting       int
	MaxWaitingPerKey int
	// WaitTimer starts the timer of a long poll: the channel fires when the wait is over, stop
	// releases it. Injected for tests. Default time.NewTimer.
	WaitTimer func(d time.Duration) (c <-chan time.Time, stop func() bool)
	// SweepEvery is how often RunSweeper runs the retention sweep (default DefaultSweepEvery);
	// SweepBatch bounds the items one sweep transaction expires (default DefaultSweepBatch).
	SweepEvery time.Duration
	SweepBatch int
	// SweepTicker starts RunSweeper's ticker: the channel fires at each sweep, stop releases it.
	// Injected for tests. Default time.NewTicker.
	SweepTicker func(d time.Duration) (c <-chan time.Time, stop func())
	// TrustProxy says which header carries the client address.
	TrustProxy TrustProxy
	// Authority decides enrolments. Default HostKeyAuthority.
	Authority EnrolmentAuthority
	// Version is announced in /v2/relay/info.
	Version string
	// Clock and Rand are injected for tests. Defaults: time.Now, crypto/rand.
	Clock func() time.Time
	Rand  io.Reader
	// Logger receives request failures and state changes. Default: discard.
	Logger *slog.Logger
}

// Server is the relay: the v2 HTTP API over a Store.
type Server struct {
	store  Store
	key    mbx.SigningKey
	epoch  string
	opt    Options
	lim    mbx.Limits
	log    *slog.Logger
	chal   *challenges
	enrolR *rateTable
	pushR  *rateTable
	polls  *waiters
	// unsubscribe ends the subscription to a shared store's notifications (a no-op otherwise).
	unsubscribe func()
	mux         *http.ServeMux
}

// New makes a Server over store, whose relay key must be opt.Key (the store is bound to the key
// on first use and refuses any other, ErrRelayKeyMismatch). The epoch is read once: it changes
// only while the relay is stopped (restore, rotate-epoch).
func New(ctx context.Context, store Store, opt Options) (*Server, error) {
	if opt.Key.IsZero() {
		return nil, fmt.Errorf("relayserver: new: no relay key: %w", ErrBadKey)
	}
	if opt.Limits == (mbx.Limits{}) {
		opt.Limits = mbx.DefaultLimits()
	}
	if opt.MaxBody <= 0 {
		opt.MaxBody = mbx.RelayMaxBody
	}
	if opt.MaxSmallBody <= 0 {
		opt.MaxSmallBody = mbx.RelaySmallBodyMax
	}
	if opt.EnrolCallsPerMinute == 0 {
		opt.EnrolCallsPerMinute = mbx.EnrolCallsPerMinute
	}
	if opt.PushesPerMinute == 0 {
		opt.PushesPerMinute = mbx.PushesPerMinute
	}
	if opt.RateTableMax <= 0 {
		opt.RateTableMax = 10_000
	}
	if opt.MaxEnrolments <= 0 {
		opt.MaxEnrolments = mbx.MaxEnrolments
	}
	if opt.MaxChallenges <= 0 {
		opt.MaxChallenges = mbx.MaxPendingChallenges
	}
	if opt.MaxWait == 0 {
		opt.MaxWait = DefaultMaxWait
	}
	if opt.MaxWaiting <= 0 {
		opt.MaxWaiting = DefaultMaxWaiting
	}
	if opt.MaxWaitingPerKey <= 0 {
		opt.MaxWaitingPerKey = DefaultMaxWaitingPerKey
	}
	if opt.WaitTimer == nil {
		opt.WaitTimer = defaultWaitTimer
	}
	if opt.SweepEvery <= 0 {
		opt.SweepEvery = DefaultSweepEvery
	}
	if opt.SweepBatch <= 0 {
		opt.SweepBatch = DefaultSweepBatch
	}
	if opt.SweepTicker == nil {
		opt.SweepTicker = defaultTicker
	}
	if opt.Authority == nil {
		opt.Authority = HostKeyAuthority{}
	}
	if opt.Clock == nil {
		opt.Clock = time.Now
	}
	if opt.Rand == nil {
		opt.Rand = rand.Reader
	}
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.DiscardHandler)
	}
	if err := store.BindRelayKey(ctx, opt.Key.PublicKey()); err != nil {
		return nil, fmt.Errorf("relayserver: new: %w", err)
	}
	meta, err := store.Meta(ctx)
	if err != nil {
		return nil, fmt.Errorf("relayserver: new: %w", err)
	}
	s := &Server{
		store:  store,
		key:    opt.Key,
		epoch:  meta.Epoch,
		opt:    opt,
		lim:    opt.Limits,
		log:    opt.Logger,
		chal:   newChallenges(opt.MaxChallenges, mbx.ChallengeTTL),
		enrolR: newRateTable(opt.EnrolCallsPerMinute, time.Minute, opt.RateTableMax),
		pushR:  newRateTable(opt.PushesPerMinute, time.Minute, opt.RateTableMax),
		polls:  newWaiters(opt.MaxWaitingPerKey, opt.MaxWaiting),
	}
	s.unsubscribe = func() {}
	if n, ok := store.(Notifier); ok {
		// Commits of other relay processes on a shared store wake this one's pulls.
		s.unsubscribe = n.Subscribe(func(target string) {
			if target == "" {
				s.polls.wakeAll()
			} else {
				s.polls.wake(target)
			}
		})
	}
	s.routes()
	return s, nil
}

// Epoch returns the store epoch the server answers with.
func (s *Server) Epoch() string { return s.epoch }

// Shutdown answers every parked long poll now (each re-reads its queue and answers at once) and
// makes later pulls answer without waiting, so that http.Server.Shutdown, which waits for
// handlers, is not held up by them, and ends the subscription to a shared store's notifications
// (Notifier). It does not close the Store. Serve calls it when its graceful
// shutdown begins; a caller running the Server under its own http.Server registers it with
// RegisterOnShutdown.
func (s *Server) Shutdown() {
	s.unsubscribe()
	s.polls.close()
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

func (s *Server) routes() {
	m := http.NewServeMux()
	m.HandleFunc("GET /v2/relay/info", s.handleInfo)
	for _, p := range []string{"/v1/relay/", "/v2/relay/"} {
		m.HandleFunc("POST "+p+"challenge", s.handleChallenge)
		m.HandleFunc("POST "+p+"enrol", s.handleEnrol)
	}
	m.HandleFunc("POST /v2/relay/items", s.handlePush)
	m.HandleFunc("GET /v2/relay/items", s.handlePull)
	m.HandleFunc("POST /v2/relay/ack", s.handleAck)
	m.HandleFunc("POST /v2/relay/senders", s.handleSenders)
	m.HandleFunc("POST /v2/relay/enc-key", s.handlePublishEncKey)
	m.HandleFunc("GET /v2/relay/enc-key", s.handleGetEncKey)
	m.HandleFunc("POST /v1/relay/enc-key", s.handlePublishEncKey)
	m.HandleFunc("GET /v1/relay/enc-key", s.handleGetEncKey)
	m.HandleFunc("POST /v2/relay/rotate", s.handleRotate)
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		s.writeJSON(w, http.StatusNotFound, mbx.ErrorResponse{Error: "no such endpoint"})
	})
	s.mux = m
}

// readBody reads the whole body, refusing more than max bytes while streaming: a body over the
// cap is never read to its end, let alone stored.
func readBody(w http.ResponseWriter, r *http.Request, max int64) ([]byte, error) {
	if r.ContentLength > max {
		return nil, fmt.Errorf("%w: %d bytes, the cap is %d", ErrTooLarge, r.ContentLength, max)
	}
	rd := http.MaxBytesReader(w, r.Body, max)
	var body []byte
	var err error
	if r.ContentLength >= 0 {
		// A declared length (at most max) is all the body there is (net/http stops reading there):
		// one buffer of that size, filled.
		body = make([]byte, r.ContentLength)
		_, err = io.ReadFull(rd, body)
	} else {
		body, err = io.ReadAll(rd)
	}
	if err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			return nil, fmt.Errorf("%w: the cap is %d bytes", ErrTooLarge, max)
		}
		return nil, fmt.Errorf("%w: reading body: %v", ErrBadRequest, err)
	}
	return body, nil
}

// decodeJSON decodes one JSON value from body into v, refusing trailing data.
func decodeJSON(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: body is not the expected JSON: %v", ErrBadRequest, err)
	}
	if dec.More() {
		return fmt.Errorf("%w: trailing data after the JSON body", ErrBadRequest)
	}
	return nil
}

// signedBody reads r's body (at most max bytes, checked while streaming) and checks the hop that
// signed it, returning the caller's live enrolment and the body. On a failure it has answered r
// and ok is false.
func (s *Server) signedBody(w http.ResponseWriter, r *http.Request, max int64) (caller Enrolment, body []byte, ok bool) {
	body, err := readBody(w, r, max)
	if err == nil {
		caller, err = s.authenticate(r, body)
	}
	if err != nil {
		s.writeError(w, r, err)
		return Enrolment{}, nil, false
	}
	return caller, body, true
}

// signedJSON is signedBody, then the body decoded into v.
func (s *Server) signedJSON(w http.ResponseWriter, r *http.Request, max int64, v any) (Enrolment, bool) {
	caller, body, ok := s.signedBody(w, r, max)
	if !ok {
		return Enrolment{}, false
	}
	if err := decodeJSON(body, v); err != nil {
		s.writeError(w, r, err)
		return Enrolment{}, false
	}
	return caller, true
}

// publicJSON is the start of a request without a hop (challenge, enrol, rotate): it counts the
// call against the client address's rate, reads the small body and decodes it into v. On a
// failure it has answered r and returns false.
func (s *Server) publicJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	if !s.enrolR.allow(clientKey(r, s.opt.TrustProxy), s.opt.Clock()) {
		s.writeError(w, r, ErrRateLimited)
		return false
	}
	body, err := readBody(w, r, s.opt.MaxSmallBody)
	if err == nil {
		err = decodeJSON(body, v)
	}
	if err != nil {
		s.writeError(w, r, err)
		return false
	}
	return true
}

// writeJSON writes v as the response, without Go's HTML escaping (bytes as JSON.stringify would
// write them).
func (s *Server) writeJSON(w http.ResponseWriter, status int, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		s.log.Error("encode response", "err", err)
		http.Error(w, `{"error":"internal error"}`, http.StatusInternalServerError)
		return
	}
	b := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// writeError answers err through the mapping of httperr.go.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	status, body := errorResponse(err)
	if status >= 500 {
		s.log.Warn("relay request failed", "method", r.Method, "path", r.URL.Path, "status", status, "err", err)
	} else {
		s.log.Debug("relay request refused", "method", r.Method, "path", r.URL.Path, "status", status, "err", err)
	}
	if status == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", "60")
	}
	s.writeJSON(w, status, body)
}

// authenticate checks the v2 hop of r (x-mbx-key) and returns the caller's live enrolment. The
// signature is checked against the claimed key before the key is looked up, so a caller learns
// "not enrolled" only about its own key.
func (s *Server) authenticate(r *http.Request, body []byte) (Enrolment, error) {
	key := r.Header.Get(mbx.HeaderKey)
	if key == "" {
		return s.authenticateV1(r, body)
	}
	if !mbx.ValidPublicKey(key) {
		return Enrolment{}, fmt.Errorf("%w: x-mbx-key is not a host key", mbx.ErrBadHop)
	}
	if err := mbx.VerifyRelayHop(key, r.Header, r.Method, mbx.RelaySignedPath(r.URL), body, s.opt.Clock()); err != nil {
		return Enrolment{}, err
	}
	e, err := s.store.Enrolment(r.Context(), key)
	if errors.Is(err, ErrNotFound) {
		return Enrolment{}, ErrNotEnrolled
	}
	if err != nil {
		return Enrolment{}, err
	}
	if !e.Live() {
		return Enrolment{}, fmt.Errorf("host key %s: %w", mbx.Fingerprint(key), ErrRevoked)
	}
	return e, nil
}

// authenticateV1 finds the caller of a v1 hop (no x-mbx-key) by name: whichever live enrolment
// of the name verifies the signature, unless the name is crowded.
func (s *Server) authenticateV1(r *http.Request, body []byte) (Enrolment, error) {
	name := r.Header.Get(mbx.HeaderHost)
	if name == "" || r.Header.Get(mbx.HeaderSig) == "" {
		return Enrolment{}, fmt.Errorf("%w: missing x-mbx headers", mbx.ErrBadHop)
	}
	es, err := s.store.EnrolmentsByName(r.Context(), name, mbx.MaxEnrolmentsPerName+1)
	if err != nil {
		return Enrolment{}, err
	}
	if len(es) > mbx.MaxEnrolmentsPerName {
		return Enrolment{}, fmt.Errorf("%w: host name is ambiguous on this relay, use x-mbx-key", mbx.ErrBadHop)
	}
	path := mbx.RelaySignedPath(r.URL)
	var last error = ErrNotEnrolled
	for _, e := range es {
		if err := mbx.VerifyRelayHop(e.HostPubkey, r.Header, r.Method, path, body, s.opt.Clock()); err == nil {
			return e, nil
		} else {
			last = err
		}
	}
	return Enrolment{}, last
}
