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
	"strconv"
	"sync"
	"time"

	"github.com/agentmbx/agentmbx/internal/bodylimit"
	"github.com/agentmbx/agentmbx/internal/logkey"
	"github.com/agentmbx/agentmbx/internal/version"
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
	// MaxSmallBody caps challenge, enrol, rotate, ack and enc-key bodies. Default
	// mbx.RelaySmallBodyMax.
	MaxSmallBody int64
	// MaxSendersBody caps a sender allowlist's body. Default DefaultMaxSendersBody.
	MaxSendersBody int64
	// BodyBudget caps the request body bytes in flight across the relay, counted as they arrive
	// (a declared length reserves nothing); one client address may hold a quarter of it (an IPv6
	// /56 three eighths, a /48 half) and the requests naming one key a quarter. Past any of these
	// a request gets 503 with Retry-After. Default DefaultBodyBudget.
	BodyBudget int64
	// MaxPerClient caps the requests with a body one client address (an IPv6 /64) has in flight.
	// Default DefaultMaxPerClient.
	MaxPerClient int
	// EnrolCallsPerMinute limits challenge, enrol and rotate calls per client address.
	// Default mbx.EnrolCallsPerMinute; negative disables.
	EnrolCallsPerMinute int
	// PushesPerMinute limits push requests per sender key. Default mbx.PushesPerMinute;
	// negative disables.
	PushesPerMinute int
	// NewEnrolmentsPerDay limits the enrolments of new host keys per client address (IPv6: per
	// /64, with 4× per /56 and 16× per /48). Default DefaultNewEnrolmentsPerDay; negative
	// disables.
	NewEnrolmentsPerDay int
	// RateTableMax caps the buckets each rate table remembers (an IPv6 client has three: /64,
	// /56, /48). Default DefaultRateTableMax.
	RateTableMax int
	// MaxEnrolments caps live enrolments. Default mbx.MaxEnrolments.
	MaxEnrolments int64
	// MaxRelayItems and MaxRelayBytes cap what all queues hold together; past them pushes get
	// rejected:quota:relay (retryable). Zero or negative: no relay-wide limit (Serve derives
	// them from the store disk's free space at start, see DiskShare).
	MaxRelayItems int64
	MaxRelayBytes int64
	// MaxSenderDedup caps the dedup rows one sender key holds (tombstones included); past it its
	// pushes get rejected:quota:sender_dedup (retryable) until the sweep prunes its rows past
	// HonestRetryHorizon. Default DefaultMaxSenderDedup; negative: no cap.
	MaxSenderDedup int64
	// MaxWait caps the long-poll wait of a pull (GET /v2/relay/items?wait=seconds); longer waits
	// are cut to it, and /v2/relay/info announces it as limits.max_wait. Default DefaultMaxWait;
	// negative disables long polling (every pull answers at once).
	MaxWait time.Duration
	// MaxWaiting caps the pulls parked at once (default ParkedCapFor(MachineMemory()): a quarter
	// of the memory at 16 KiB a poll); past it a pull answers at once, an empty page with
	// Retry-After: 10. MaxWaitingPerKey caps them per host key (default
	// DefaultMaxWaitingPerKey); a newer pull of the key evicts its oldest, which answers at once.
	// MaxWaitingPerClient caps them per client address (an IPv4 address, an IPv6 /64; a /56 has
	// 4×, a /48 16×, none more than half of MaxWaiting; default MaxWaiting/16, at least 64), so
	// that one address cannot take them all.
	MaxWaiting          int
	MaxWaitingPerKey    int
	MaxWaitingPerClient int
	// ResponseBudget caps the bytes of pull answers held in memory at once, across the relay
	// (default DefaultResponseBudget): an answer is read and written a chunk at a time, each
	// chunk held against it; past it a page ends early (more) or, with nothing read yet, the
	// pull gets 503 with Retry-After.
	ResponseBudget int64
	// MaxPullsPerKey caps the answers one host key may have being written at once (default
	// DefaultMaxPullsPerKey; a newer pull ends the oldest); MaxPullsPerClient caps them per client
	// address (default DefaultMaxPullsPerClient; past it a pull gets 503 with Retry-After).
	MaxPullsPerKey    int
	MaxPullsPerClient int
	// PullChunk is how many wire bytes of a pull answer are read from the store and held at once
	// (default DefaultPullChunk, and never less than Limits.MaxItemBytes).
	PullChunk int64
	// PullWriteGrace and PullMinRate set the write deadline of each chunk of a pull answer: the
	// grace plus the chunk's bytes at the rate (bytes per second). Defaults DefaultPullWriteGrace,
	// DefaultPullMinRate.
	PullWriteGrace time.Duration
	PullMinRate    int64
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
	// DenyPollEvery is how often RunDenyWatch reads the deny list from the store (default
	// DefaultDenyPollEvery): how late a replica may learn of an entry another process added.
	DenyPollEvery time.Duration
	// TrustProxy says which header carries the client address.
	TrustProxy TrustProxy
	// Authority decides enrolments. Default HostKeyAuthority.
	Authority EnrolmentAuthority
	// Version is announced in /v2/relay/info; default the build's (internal/version: the module
	// version from the build info, or the stamp of make build).
	Version string
	// Clock and Rand are injected for tests. Defaults: time.Now, crypto/rand.
	Clock func() time.Time
	Rand  io.Reader
	// Logger receives request failures and state changes. Default: discard.
	Logger *slog.Logger
	// Metrics, when set, count what the relay does (see metrics.go). MetricsToken, when set,
	// also serves them at GET /metrics on the relay's own listener to callers that send
	// "Authorization: Bearer <token>".
	Metrics      *Metrics
	MetricsToken string
	// HeartbeatEvery is how often the caller writes the heartbeat (Server.Heartbeat); /readyz
	// reports not ready when none succeeded in three times that. Default mbx.RelayHeartbeat.
	HeartbeatEvery time.Duration
}

// Server is the relay: the v2 HTTP API over a Store.
type Server struct {
	store  Store
	key    mbx.SigningKey
	pub    string // key's public key, as the accept statements carry it
	epoch  string
	opt    Options
	lim    mbx.Limits
	log    *slog.Logger
	chal   challenger
	enrolR *rateTable
	// newEnrolR counts enrolments of new keys per client address and day.
	newEnrolR *rateTable
	pushR     *rateTable
	polls     *waiters
	// held holds parked long polls as bare connections, when served through Listener (held.go).
	held *heldSet
	// pulls, respBudget and pullChunk bound the pull answers being written (pull_slots.go).
	pulls      *pullSlots
	respBudget *bodylimit.Budget
	pullChunk  int64
	// unsubscribe ends the subscription to a shared store's notifications (a no-op otherwise).
	unsubscribe func()
	mux         *http.ServeMux
	// budget and inflight bound the request bodies in flight (admission.go).
	budget   *bodylimit.Budget
	inflight *inflight
	// proofRequired: the authority admits no host without a proof, so an enrolment whose proof
	// expired has no rights left (AuthDecision.Until).
	proofRequired bool
	// cap holds the relay-wide limits (capacity.go).
	cap  *capacity
	met  *Metrics
	ops  opsState
	deny denyState
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
	if opt.Version == "" {
		opt.Version = version.String()
	}
	if opt.MaxBody <= 0 {
		opt.MaxBody = mbx.RelayMaxBody
	}
	if opt.MaxSmallBody <= 0 {
		opt.MaxSmallBody = mbx.RelaySmallBodyMax
	}
	if opt.MaxSendersBody <= 0 {
		opt.MaxSendersBody = DefaultMaxSendersBody
	}
	if opt.BodyBudget <= 0 {
		opt.BodyBudget = DefaultBodyBudget
	}
	if opt.MaxPerClient <= 0 {
		opt.MaxPerClient = DefaultMaxPerClient
	}
	if opt.EnrolCallsPerMinute == 0 {
		opt.EnrolCallsPerMinute = mbx.EnrolCallsPerMinute
	}
	if opt.PushesPerMinute == 0 {
		opt.PushesPerMinute = mbx.PushesPerMinute
	}
	// Announced in the info so that hosts pace their pushes under it (none when unlimited).
	opt.Limits.PushesPerMinute = max(opt.PushesPerMinute, 0)
	if opt.NewEnrolmentsPerDay == 0 {
		opt.NewEnrolmentsPerDay = DefaultNewEnrolmentsPerDay
	}
	if opt.RateTableMax <= 0 {
		opt.RateTableMax = DefaultRateTableMax
	}
	if opt.MaxEnrolments <= 0 {
		opt.MaxEnrolments = mbx.MaxEnrolments
	}
	if opt.MaxSenderDedup == 0 {
		opt.MaxSenderDedup = DefaultMaxSenderDedup
	}
	if opt.MaxWait == 0 {
		opt.MaxWait = DefaultMaxWait
	}
	if opt.MaxWaiting <= 0 {
		opt.MaxWaiting = ParkedCapFor(MachineMemory())
	}
	if opt.MaxWaitingPerClient <= 0 {
		opt.MaxWaitingPerClient = max(opt.MaxWaiting/16, 64)
	}
	if opt.MaxWaitingPerKey <= 0 {
		opt.MaxWaitingPerKey = DefaultMaxWaitingPerKey
	}
	if opt.ResponseBudget <= 0 {
		opt.ResponseBudget = DefaultResponseBudget
	}
	if opt.MaxPullsPerKey <= 0 {
		opt.MaxPullsPerKey = DefaultMaxPullsPerKey
	}
	if opt.MaxPullsPerClient <= 0 {
		opt.MaxPullsPerClient = DefaultMaxPullsPerClient
	}
	if opt.PullChunk <= 0 {
		opt.PullChunk = DefaultPullChunk
	}
	if opt.PullWriteGrace <= 0 {
		opt.PullWriteGrace = DefaultPullWriteGrace
	}
	if opt.PullMinRate <= 0 {
		opt.PullMinRate = DefaultPullMinRate
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
	if opt.DenyPollEvery <= 0 {
		opt.DenyPollEvery = DefaultDenyPollEvery
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
	if opt.HeartbeatEvery <= 0 {
		opt.HeartbeatEvery = mbx.RelayHeartbeat
	}
	if err := store.BindRelayKey(ctx, opt.Key.PublicKey()); err != nil {
		return nil, fmt.Errorf("relayserver: new: %w", err)
	}
	meta, err := store.Meta(ctx)
	if err != nil {
		return nil, fmt.Errorf("relayserver: new: %w", err)
	}
	secret, err := store.ChallengeSecret(ctx)
	if err != nil {
		return nil, fmt.Errorf("relayserver: new: %w", err)
	}
	s := &Server{
		store:      store,
		key:        opt.Key,
		pub:        opt.Key.PublicKey(),
		epoch:      meta.Epoch,
		opt:        opt,
		lim:        opt.Limits,
		log:        opt.Logger,
		chal:       challenger{secret: secret, ttl: mbx.ChallengeTTL},
		enrolR:     newRateTable(opt.EnrolCallsPerMinute, time.Minute, opt.RateTableMax),
		pushR:      newRateTable(opt.PushesPerMinute, time.Minute, opt.RateTableMax),
		newEnrolR:  newRateTable(opt.NewEnrolmentsPerDay, 24*time.Hour, opt.RateTableMax),
		polls:      newWaiters(opt.MaxWaitingPerKey, opt.MaxWaiting, opt.MaxWaitingPerClient),
		pulls:      newPullSlots(opt.MaxPullsPerKey, opt.MaxPullsPerClient),
		pullChunk:  max(opt.PullChunk, opt.Limits.MaxItemBytes),
		respBudget: bodylimit.NewBudget(opt.ResponseBudget),
		budget:     bodylimit.NewBudget(opt.BodyBudget),
		inflight:   &inflight{max: opt.MaxPerClient, m: map[string]int{}},
		met:        opt.Metrics,
	}
	if pr, ok := opt.Authority.(ProofRequirer); ok {
		s.proofRequired = pr.ProofRequired()
	}
	s.polls.onHeld = s.wakeHeld
	s.ops.init(opt.Clock())
	s.deny.applied = map[string]bool{}
	if err := s.ReloadDeny(ctx); err != nil {
		return nil, err
	}
	if s.met != nil {
		if err := s.met.attach(s); err != nil {
			return nil, err
		}
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
	s.cap = &capacity{store: store, maxItems: opt.MaxRelayItems, maxBytes: opt.MaxRelayBytes}
	s.cap.reload(ctx, opt.Clock())
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
	s.ops.draining.Store(true)
	s.unsubscribe()
	s.polls.close()
	if s.held != nil {
		s.held.close() // the held polls, woken by the close, have been answered
	}
}

// ServeHTTP implements http.Handler: every request gets a request id (ops.go).
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.serveObserved(w, r) }

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
	s.routesV1(m)
	s.opsRoutes(m)
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		s.writeJSON(w, http.StatusNotFound, mbx.ErrorResponse{Error: "no such endpoint"})
	})
	s.mux = m
}

// decodeJSON decodes one JSON value from body into v, refusing trailing data. json.Unmarshal reads
// body in place (a json.Decoder would first copy it into a buffer of its own).
func decodeJSON(body []byte, v any) error {
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("%w: body is not the expected JSON: %v", ErrBadRequest, err)
	}
	return nil
}

// signedJSON is signedBody, then the body decoded into v.
func (s *Server) signedJSON(w http.ResponseWriter, r *http.Request, max int64, v any) (Enrolment, bool) {
	caller, body, ok := s.signedBody(w, r, max, nil)
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
	if !s.enrolR.allowAll(clientKeys(r, s.opt.TrustProxy), s.opt.Clock()) {
		s.writeError(w, r, ErrRateLimited)
		return false
	}
	body, err := readBody(w, r, s.opt.MaxSmallBody, nil)
	if err == nil {
		err = decodeJSON(body, v)
	}
	if err != nil {
		s.writeError(w, r, err)
		return false
	}
	return true
}

// jsonBufs are the response buffers the JSON writers reuse.
var jsonBufs = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// putJSONBuf returns buf to jsonBufs, unless a huge answer grew it.
func putJSONBuf(buf *bytes.Buffer) {
	if buf.Cap() <= 1<<20 {
		buf.Reset()
		jsonBufs.Put(buf)
	}
}

// writeJSON writes v as the response, without Go's HTML escaping (bytes as JSON.stringify would
// write them).
func (s *Server) writeJSON(w http.ResponseWriter, status int, v any) {
	buf := jsonBufs.Get().(*bytes.Buffer)
	defer putJSONBuf(buf)
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		s.log.Error("encode response", logkey.Err, err)
		http.Error(w, `{"error":"internal error"}`, http.StatusInternalServerError)
		return
	}
	writeRawJSON(w, status, bytes.TrimSuffix(buf.Bytes(), []byte("\n")))
}

// writeRawJSON writes b, a JSON value, as the response, in one write with its length declared.
func writeRawJSON(w http.ResponseWriter, status int, b []byte) {
	h := w.Header()
	h["Content-Type"] = jsonContentType[:1:1] // net/http copies header values; nothing writes to this one
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// jsonContentType is the Content-Type of every JSON answer.
var jsonContentType = []string{"application/json"}

// writeError answers err through the mapping of httperr.go.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	status, body := errorResponse(err)
	if status >= 500 {
		s.log.Warn("relay request failed",
			logkey.Req, RequestID(r.Context()), logkey.Method, r.Method, logkey.Path, r.URL.Path,
			logkey.Status, status, logkey.Err, err)
	} else {
		s.log.Debug("relay request refused",
			logkey.Req, RequestID(r.Context()), logkey.Method, r.Method, logkey.Path, r.URL.Path,
			logkey.Status, status, logkey.Err, err)
	}
	if unread(r) {
		w.Header().Set("Connection", "close")
	}
	switch {
	case status == http.StatusTooManyRequests:
		w.Header().Set("Retry-After", "60")
	case errors.Is(err, ErrBusy), errors.Is(err, ErrRelayFull):
		w.Header().Set("Retry-After", retryAfter)
	}
	s.writeJSON(w, status, body)
}
