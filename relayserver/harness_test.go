package relayserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/internal/testkit"
	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/relayserver"
	"github.com/agentmbx/agentmbx/relayserver/sqlitestore"
)

var bg = context.Background()

// t0 is the tests' start of time: 2026-03-14T09:26:53.589Z.
var t0 = time.UnixMilli(1773480413589).UTC()

// seeded is a deterministic byte source.
func seeded(n uint64) io.Reader { return testkit.Rand(n) }

func keyFor(t testing.TB, n uint64) mbx.SigningKey {
	k, err := mbx.GenerateSigningKey(seeded(1000 + n))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// relay is a Server over a SQLite store in a temp dir, behind an httptest server, with a fake
// clock.
type relay struct {
	t     testing.TB
	dir   string
	key   mbx.SigningKey
	clock *testkit.Clock
	opts  func(*relayserver.Options)
	sopts sqlitestore.Options
	// wrap, when set, wraps the store the server uses (tests that intercept store calls).
	wrap  func(relayserver.Store) relayserver.Store
	store *sqlitestore.Store
	srv   *relayserver.Server
	ts    *httptest.Server
	// standardPolls parks long polls the standard way (a handler goroutine each), as a relay
	// does over HTTP/2 or off Linux.
	standardPolls bool
}

func newRelay(t testing.TB, opts func(*relayserver.Options)) *relay {
	return newRelayWith(t, opts, sqlitestore.Options{})
}

func newRelayWith(t testing.TB, opts func(*relayserver.Options), so sqlitestore.Options) *relay {
	return newRelayMode(t, opts, so, false)
}

// newRelayMode is newRelayWith whose long polls park the standard way when standard is set.
func newRelayMode(t testing.TB, opts func(*relayserver.Options), so sqlitestore.Options, standard bool) *relay {
	r := &relay{t: t, dir: t.TempDir(), key: keyFor(t, 0), clock: testkit.NewClock(t0), opts: opts, sopts: so,
		standardPolls: standard}
	r.start()
	t.Cleanup(r.stop)
	return r
}

func (r *relay) start() {
	st, srv, err := r.open()
	if err != nil {
		r.t.Fatal(err)
	}
	r.store, r.srv = st, srv
	// As relay serve runs it: parked polls held as bare connections (held.go), unless the test
	// asks for the standard way.
	r.ts = httptest.NewUnstartedServer(srv)
	if !r.standardPolls {
		r.ts.Listener = srv.Listener(r.ts.Listener)
	}
	r.ts.Start()
}

func (r *relay) open() (*sqlitestore.Store, *relayserver.Server, error) {
	so := r.sopts
	so.LockWait = 5 * time.Second
	st, err := sqlitestore.Open(bg, r.dir, &so)
	if err != nil {
		return nil, nil, fmt.Errorf("open store: %w", err)
	}
	o := relayserver.Options{Key: r.key, Clock: r.clock.Now, Rand: seeded(42), Version: "test"}
	if r.opts != nil {
		r.opts(&o)
	}
	var use relayserver.Store = st
	if r.wrap != nil {
		use = r.wrap(st)
	}
	srv, err := relayserver.New(bg, use, o)
	if err != nil {
		st.Close()
		return nil, nil, fmt.Errorf("new server: %w", err)
	}
	return st, srv, nil
}

func (r *relay) stop() {
	if r.ts != nil {
		r.srv.Shutdown() // parked long polls answer, so Close does not wait for them
		r.ts.Close()
		r.store.Close()
		r.ts = nil
	}
}

func (r *relay) restart() { r.stop(); r.start() }

type host struct {
	name string
	key  mbx.SigningKey
}

func (h host) pub() string { return h.key.PublicKey() }

func newHost(t testing.TB, name string, n uint64) host { return host{name: name, key: keyFor(t, n)} }

// call sends a request; with h non-nil it is signed as a v2 hop by h at the relay's clock.
func (r *relay) call(h *host, method, path string, body []byte) (int, []byte) {
	r.t.Helper()
	code, b, err := callURL(bg, r.ts.URL, h, r.clock.Now(), method, path, body)
	if err != nil {
		r.t.Fatalf("%s %s: %v", method, path, err)
	}
	return code, b
}

// callURL sends a request to the relay at base; with h non-nil it is signed as a v2 hop by h at
// now. It may run on any goroutine.
func callURL(ctx context.Context, base string, h *host, now time.Time, method, path string, body []byte) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, base+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	if h != nil {
		for k, v := range mbx.SignRelayHop(h.key, h.name, method, mbx.RelaySignedPath(req.URL), body, now, true) {
			req.Header[k] = v
		}
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil, err
	}
	return resp.StatusCode, b, nil
}

func mustJSON(t testing.TB, v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func decode[T any](t testing.TB, b []byte) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("decode %T from %s: %v", v, b, err)
	}
	return v
}

func (r *relay) enrol(h host) {
	r.t.Helper()
	if code, b := r.tryEnrol(h, ""); code != 200 {
		r.t.Fatalf("enrol %s: %d %s", h.name, code, b)
	}
}

func (r *relay) tryEnrol(h host, proof string) (int, []byte) {
	r.t.Helper()
	code, b := r.call(nil, "POST", "/v1/relay/challenge", mustJSON(r.t, mbx.ChallengeRequest{Host: h.name, Pubkey: h.pub()}))
	if code != 200 {
		return code, b
	}
	c := decode[mbx.ChallengeResponse](r.t, b)
	req, err := mbx.SignEnrolment(h.key, h.name, c.Challenge, "")
	if err != nil {
		r.t.Fatal(err)
	}
	req.Proof = proof
	return r.call(nil, "POST", "/v1/relay/enrol", mustJSON(r.t, req))
}

// envWire is a stand-in sealed envelope: the relay sees only its id and that enc is set.
func envWire(id, extra string) []byte {
	return []byte(fmt.Sprintf(`{"v":3,"id":%q,"body":"c2VhbGVk%s","enc":{"v":1,"alg":"x25519+xchacha20poly1305","body":"c2VhbGVk"}}`, id, extra))
}

func envItem(id string, targets ...host) mbx.PushItem {
	it := mbx.PushItem{Kind: "envelope", ItemID: id}
	for _, t := range targets {
		it.Targets = append(it.Targets, mbx.PushTarget{HostPubkey: t.pub(), WireB64: mbx.B64(envWire(id, ""))})
	}
	return it
}

func (r *relay) push(h host, items ...mbx.PushItem) mbx.PushResponse {
	r.t.Helper()
	code, b := r.call(&h, "POST", "/v2/relay/items", mustJSON(r.t, mbx.PushRequest{Items: items}))
	if code != 200 {
		r.t.Fatalf("push: %d %s", code, b)
	}
	return decode[mbx.PushResponse](r.t, b)
}

func (r *relay) pull(h host, after int64) mbx.PullResponse {
	r.t.Helper()
	code, b := r.call(&h, "GET", fmt.Sprintf("/v2/relay/items?after=%d&limit=500", after), nil)
	if code != 200 {
		r.t.Fatalf("pull: %d %s", code, b)
	}
	return decode[mbx.PullResponse](r.t, b)
}

func statuses(resp mbx.PushResponse) []string {
	var out []string
	for _, r := range resp.Results {
		out = append(out, r.Status)
	}
	return out
}

func ids(p mbx.PullResponse) []string {
	var out []string
	for _, it := range p.Items {
		out = append(out, it.ItemID)
	}
	return out
}

// rotationBody is the body of POST /v2/relay/rotate for old rotating to next (same host name),
// signed by both keys at the relay's clock.
func (r *relay) rotationBody(old, next host) []byte {
	r.t.Helper()
	encKey, err := mbx.GenerateEncKey(seeded(77))
	if err != nil {
		r.t.Fatal(err)
	}
	rot, err := mbx.SignRotation(old.name, old.key, next.key, encKey.PublicKey(), r.clock.Now())
	if err != nil {
		r.t.Fatal(err)
	}
	return mustJSON(r.t, map[string]any{"rotation": rot})
}

// rotate posts the rotation of old to next and fails the test unless the relay takes it.
func (r *relay) rotate(old, next host) mbx.RotateResponse {
	r.t.Helper()
	code, out := r.call(nil, "POST", "/v2/relay/rotate", r.rotationBody(old, next))
	if code != 200 {
		r.t.Fatalf("rotate = %d %s", code, out)
	}
	return decode[mbx.RotateResponse](r.t, out)
}
