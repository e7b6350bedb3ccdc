package host

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/checkpoint"
	"github.com/agentmbx/agentmbx/internal/testkit"
	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/outbox"
	"github.com/agentmbx/agentmbx/relayclient"
	"github.com/agentmbx/agentmbx/relaylink"
	"github.com/agentmbx/agentmbx/relayserver"
	"github.com/agentmbx/agentmbx/relayserver/sqlitestore"
)

// testRelay is the real relay (relayserver over sqlitestore) on 127.0.0.1, on the hosts' fake
// clock, behind a front that lets a test count, lose, fail or rewrite answers, and swap the relay
// behind the same URL (a restore, a new epoch, a new relay key).
// lostTries is how many failures make one relay client call fail: the client retries an
// idempotent request relayclient.DefaultRetryMax times inside the call.
const lostTries = 1 + relayclient.DefaultRetryMax

type testRelay struct {
	t     *testing.T
	clock *testkit.Clock
	url   string
	ts    *httptest.Server
	cur   atomic.Pointer[relayBackend]

	mu           sync.Mutex
	pushes       int                      // POST /v2/relay/items seen
	pulls        int                      // GET /v2/relay/items seen
	dropPushes   int                      // handle the next n pushes, then drop their answers (lostTries: a whole call)
	failAcks     int                      // answer the next n acks 503 without handling them
	rewrite      func(body []byte) []byte // rewrites push answers (nil: none)
	throttle     int                      // answer the next n pushes with throttleCode, unhandled
	throttleCode int                      // 429 or 503
	retryAfter   string                   // the Retry-After of those answers ("" for none)
}

type relayBackend struct {
	key   mbx.SigningKey
	store *sqlitestore.Store
	srv   *relayserver.Server
	dir   string
}

func newTestRelay(t *testing.T, clock *testkit.Clock, limits mbx.Limits) *testRelay {
	t.Helper()
	r := &testRelay{t: t, clock: clock}
	key, err := mbx.GenerateSigningKey(testkit.Rand(900))
	if err != nil {
		t.Fatal(err)
	}
	r.cur.Store(r.backend(key, t.TempDir(), limits))
	r.ts = httptest.NewServer(http.HandlerFunc(r.serve))
	r.url = r.ts.URL
	t.Cleanup(r.ts.Close)
	return r
}

// backend opens a relay store in dir and a server over it with key.
func (r *testRelay) backend(key mbx.SigningKey, dir string, limits mbx.Limits) *relayBackend {
	r.t.Helper()
	ctx := context.Background()
	st, err := sqlitestore.Open(ctx, dir, nil)
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { st.Close() })
	srv, err := relayserver.New(ctx, st, relayserver.Options{Key: key, Version: "test", Clock: r.clock.Now,
		Limits: limits, EnrolCallsPerMinute: -1, PushesPerMinute: -1})
	if err != nil {
		r.t.Fatal(err)
	}
	return &relayBackend{key: key, store: st, srv: srv, dir: dir}
}

func (r *testRelay) key() mbx.SigningKey { return r.cur.Load().key }

func (r *testRelay) epoch() string { return r.cur.Load().srv.Epoch() }

// rotateEpoch gives the relay's store a new epoch and serves it (a restore that kept the data).
func (r *testRelay) rotateEpoch() {
	r.t.Helper()
	b := r.cur.Load()
	if _, err := b.store.RotateEpoch(context.Background()); err != nil {
		r.t.Fatal(err)
	}
	srv, err := relayserver.New(context.Background(), b.store, relayserver.Options{Key: b.key, Version: "test",
		Clock: r.clock.Now, EnrolCallsPerMinute: -1, PushesPerMinute: -1})
	if err != nil {
		r.t.Fatal(err)
	}
	r.cur.Store(&relayBackend{key: b.key, store: b.store, srv: srv, dir: b.dir})
}

// wipe replaces the relay's store by an empty one under the same key (a restore from nothing:
// new epoch, no enrolments, no items).
func (r *testRelay) wipe() {
	r.t.Helper()
	r.cur.Store(r.backend(r.key(), r.t.TempDir(), mbx.Limits{}))
}

// rekey replaces the relay by another one with another key behind the same URL.
func (r *testRelay) rekey() mbx.SigningKey {
	r.t.Helper()
	key, err := mbx.GenerateSigningKey(testkit.Rand(901))
	if err != nil {
		r.t.Fatal(err)
	}
	r.cur.Store(r.backend(key, r.t.TempDir(), mbx.Limits{}))
	return key
}

func (r *testRelay) counts() (pushes, pulls int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pushes, r.pulls
}

func (r *testRelay) set(fn func(r *testRelay)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fn(r)
}

func (r *testRelay) serve(w http.ResponseWriter, req *http.Request) {
	srv := r.cur.Load().srv
	push := req.Method == http.MethodPost && req.URL.Path == "/v2/relay/items"
	r.mu.Lock()
	drop, failAck, rewrite, throttle := false, false, r.rewrite, 0
	switch {
	case push:
		r.pushes++
		if r.throttle > 0 {
			r.throttle--
			throttle = r.throttleCode
		} else if r.dropPushes > 0 {
			r.dropPushes--
			drop = true
		}
	case req.Method == http.MethodGet && req.URL.Path == "/v2/relay/items":
		r.pulls++
	case req.URL.Path == "/v2/relay/ack" && r.failAcks > 0:
		r.failAcks--
		failAck = true
	}
	r.mu.Unlock()
	switch {
	case throttle != 0:
		if r.retryAfter != "" {
			w.Header().Set("Retry-After", r.retryAfter)
		}
		http.Error(w, `{"error":"slow down"}`, throttle)
	case failAck:
		http.Error(w, `{"error":"injected ack failure"}`, http.StatusServiceUnavailable)
	case drop:
		// The relay commits; the answer is lost on the way back.
		srv.ServeHTTP(httptest.NewRecorder(), req)
		panic(http.ErrAbortHandler)
	case push && rewrite != nil:
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, req)
		body := rewrite(rec.Body.Bytes())
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.Header().Del("Content-Length")
		w.WriteHeader(rec.Code)
		w.Write(body)
	default:
		srv.ServeHTTP(w, req)
	}
}

// relayHost is a test host with a relay pinned and enrolled.
func (th *testHost) useRelay(r *testRelay) {
	th.t.Helper()
	if _, err := th.Relay().RelaySet(context.Background(), api.RelaySetRequest{URL: r.url, Key: r.key().Fingerprint()}); err != nil {
		th.t.Fatalf("%s: RelaySet: %v", th.name, err)
	}
	th.keep()
}

// keep runs the enrolment and publications. A millisecond passes first: the relay takes a sender
// list only when it is newer than the one it holds.
func (th *testHost) keep() {
	th.t.Helper()
	th.clock.Advance(time.Millisecond)
	if err := th.relayKeep(context.Background(), false); err != nil {
		th.t.Fatalf("%s: relayKeep: %v", th.name, err)
	}
}

// noLAN is th's record without a LAN address: its peers can reach it through the relay only.
func (th *testHost) noLAN() PeerRecord {
	p := th.record()
	p.Addr = ""
	return p
}

// pinNoLAN pins every host to every other without LAN addresses.
func pinNoLAN(t *testing.T, hs ...*testHost) {
	t.Helper()
	pinEach(t, (*testHost).noLAN, hs...)
}

// pull runs th's relay receiver until the relay has nothing more.
func (th *testHost) pull() int {
	th.t.Helper()
	n, err := th.relayReceive(context.Background())
	if err != nil {
		th.t.Fatalf("%s: relay receive: %v", th.name, err)
	}
	return n
}

// flow runs outbox passes and relay pulls on every host until nothing moves.
func flow(t *testing.T, hs ...*testHost) {
	t.Helper()
	rounds(t, true, hs...)
}

// copies counts the copies of message id in agent's mailbox.
func (th *testHost) copies(agent, id string) int {
	th.t.Helper()
	n := 0
	for _, m := range th.inbox(agent, true) {
		if m.ID == id {
			n++
		}
	}
	return n
}

// rewriteAccepts returns a push-answer rewriter that applies fn to every accept statement and
// re-signs it with key.
func rewriteAccepts(t *testing.T, key mbx.SigningKey, fn func(a map[string]any)) func([]byte) []byte {
	return func(body []byte) []byte {
		var resp struct {
			Results []map[string]any `json:"results"`
		}
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.UseNumber()
		if err := dec.Decode(&resp); err != nil {
			t.Errorf("push answer: %v", err)
			return body
		}
		for _, res := range resp.Results {
			a, ok := res["accept"].(map[string]any)
			if !ok {
				continue
			}
			fn(a)
			in, err := mbx.Canonical(a)
			if err != nil {
				t.Errorf("canonical: %v", err)
				return body
			}
			res["accept"] = a
			res["sig"] = key.Sign(in)
		}
		var buf bytes.Buffer
		if err := json.NewEncoder(&buf).Encode(resp); err != nil {
			t.Errorf("encode: %v", err)
		}
		return buf.Bytes()
	}
}

// rowState is the state of the row (item, host) of th.
func (th *testHost) rowState(item, host string) outbox.State {
	th.t.Helper()
	return th.row(item, host).State
}

// The relay link's operations as the tests drive them.

func (h *Host) relayLink() (*relaylink.Conn, error) { return h.relay.Conn() }

func (h *Host) relayKeep(ctx context.Context, force bool) error { return h.relay.Keep(ctx, force) }

func (h *Host) relayReceive(ctx context.Context) (int, error) { return h.relay.Receive(ctx) }

func (h *Host) relayReceiver(c *relaylink.Conn, opts checkpoint.ReceiverOptions) (*checkpoint.Receiver, error) {
	return h.relay.Receiver(c, opts)
}

func (h *Host) loadRelay() (*relaylink.Record, error) { return h.relay.Record() }
