package relayserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/internal/testkit"
	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/relayserver"
)

// failsafe bounds every wait of these tests; nothing here depends on it for correctness.
const failsafe = 20 * time.Second

// timers is a fake Options.WaitTimer: a long poll that found nothing and is about to wait
// announces itself on started, and its wait ends only when the test fires it.
type timers struct{ started chan *fakeTimer }

type fakeTimer struct {
	d time.Duration
	c chan time.Time
}

func newTimers() *timers { return &timers{started: make(chan *fakeTimer, 64)} }

func (ts *timers) start(d time.Duration) (<-chan time.Time, func() bool) {
	ft := &fakeTimer{d: d, c: make(chan time.Time, 1)}
	ts.started <- ft
	return ft.c, func() bool { return true }
}

func (ft *fakeTimer) fire() { ft.c <- time.Time{} }

// parked waits until a long poll is parked and returns its timer.
func (ts *timers) parked(t *testing.T) *fakeTimer {
	t.Helper()
	select {
	case ft := <-ts.started:
		return ft
	case <-time.After(failsafe):
		t.Fatal("no long poll parked")
		return nil
	}
}

// none checks that no long poll started waiting.
func (ts *timers) none(t *testing.T) {
	t.Helper()
	select {
	case ft := <-ts.started:
		t.Fatalf("a long poll waited (%v), want an answer at once", ft.d)
	default:
	}
}

type answer struct {
	code int
	body []byte
	err  error
}

// pollAsync sends a pull signed by h at base (the relay's test server when base is "") and
// delivers its answer on the channel.
func (r *relay) pollAsync(ctx context.Context, h host, path string) <-chan answer {
	ch := make(chan answer, 1)
	now := r.clock.Now()
	base := r.ts.URL
	go func() {
		code, b, err := callURL(ctx, base, &h, now, "GET", path, nil)
		ch <- answer{code, b, err}
	}()
	return ch
}

func await(t *testing.T, ch <-chan answer) answer {
	t.Helper()
	select {
	case a := <-ch:
		if a.err != nil {
			t.Fatalf("pull: %v", a.err)
		}
		return a
	case <-time.After(failsafe):
		t.Fatal("the pull was not answered")
		return answer{}
	}
}

func pending(t *testing.T, ch <-chan answer) {
	t.Helper()
	select {
	case a := <-ch:
		t.Fatalf("the parked pull answered early: %d %s", a.code, a.body)
	default:
	}
}

func pageOf(t *testing.T, a answer) mbx.PullResponse {
	t.Helper()
	if a.code != 200 {
		t.Fatalf("pull = %d %s, want 200", a.code, a.body)
	}
	return decode[mbx.PullResponse](t, a.body)
}

// longPollRelay is a relay whose long polls park the standard way (a handler goroutine and a
// timer each, as over HTTP/2 or off Linux), each timer one of tm's; held_test.go tests held ones.
func longPollRelay(t *testing.T, more func(*relayserver.Options)) (*relay, *timers, host, host, host) {
	tm := newTimers()
	r, a, b, g := setupMode(t, func(o *relayserver.Options) {
		o.WaitTimer = tm.start
		if more != nil {
			more(o)
		}
	}, true)
	return r, tm, a, b, g
}

func TestLongPollAnswersWhenAnItemCommits(t *testing.T) {
	t.Parallel()
	r, tm, a, b, g := longPollRelay(t, nil)
	poll := r.pollAsync(bg, b, "/v2/relay/items?after=0&wait=20")
	if ft := tm.parked(t); ft.d != 20*time.Second {
		t.Fatalf("parked for %v, want 20s", ft.d)
	}
	// An item for someone else does not answer beta's pull.
	r.push(a, envItem("01KKNTQ2CN9WJ3MR4Q1P12F0G1", g))
	if n := r.srv.ParkedPulls(); n != 1 {
		t.Fatalf("parked pulls after a push to gamma = %d, want 1", n)
	}
	pending(t, poll)
	// One for beta does, with the item.
	resp := r.push(a, envItem("01KKNTQ2CN9WJ3MR4Q1P12F0B1", b))
	seq := resp.Results[0].Targets[0].Seq
	p := pageOf(t, await(t, poll))
	if got := ids(p); len(got) != 1 || got[0] != "01KKNTQ2CN9WJ3MR4Q1P12F0B1" || p.LastSeq != seq || p.HeadSeq != seq {
		t.Fatalf("woken pull = %+v, want the item at seq %d", p, seq)
	}
	if n := r.srv.ParkedPulls(); n != 0 {
		t.Fatalf("parked pulls after the answer = %d, want 0", n)
	}
	// A duplicate push commits nothing new and wakes nobody.
	poll = r.pollAsync(bg, b, fmt.Sprintf("/v2/relay/items?after=%d&wait=20", seq))
	tm.parked(t)
	if st := statuses(r.push(a, envItem("01KKNTQ2CN9WJ3MR4Q1P12F0B1", b))); st[0] != "duplicate" {
		t.Fatalf("repeat push = %v", st)
	}
	pending(t, poll)
	r.srv.Shutdown()
	if p := pageOf(t, await(t, poll)); len(p.Items) != 0 || p.LastSeq != seq {
		t.Fatalf("pull answered at shutdown = %+v, want an empty page after %d", p, seq)
	}
}

// hookedRelay starts a relay whose long polls wait on tm's timers and whose store is wrapped by
// wrap, with alpha and beta enrolled.
func hookedRelay(t *testing.T, tm *timers, wrap func(relayserver.Store) relayserver.Store) (*relay, host, host) {
	t.Helper()
	r := &relay{t: t, dir: t.TempDir(), key: keyFor(t, 0), clock: testkit.NewClock(t0),
		opts: func(o *relayserver.Options) { o.WaitTimer = tm.start }, wrap: wrap}
	r.start()
	t.Cleanup(r.stop)
	a, b := newHost(t, "alpha", 1), newHost(t, "beta", 2)
	r.enrol(a)
	r.enrol(b)
	return r, a, b
}

// pullHook is a Store whose Pull runs a hook after reading, before returning the page.
type pullHook struct {
	relayserver.Store
	after func(target string, p relayserver.Page)
}

func (h *pullHook) Pull(ctx context.Context, target string, after int64, limit int, maxBytes int64) (relayserver.Page, error) {
	p, err := h.Store.Pull(ctx, target, after, limit, maxBytes)
	if err == nil && h.after != nil {
		h.after(target, p)
	}
	return p, err
}

// TestLongPollNoLostWakeup commits an item in the window between a pull's read of the store and
// its wait: the pull must come back with it. (A pull that registered only after its read would
// miss the wakeup and wait for the fake timer, which never fires: the failsafe would trip.)
func TestLongPollNoLostWakeup(t *testing.T) {
	t.Parallel()
	tm := newTimers()
	hook := &pullHook{}
	r, a, b := hookedRelay(t, tm, func(s relayserver.Store) relayserver.Store { hook.Store = s; return hook })
	const id = "01KKNTQ2CN9WJ3MR4Q1P12F0B1"
	pushed := make(chan error, 1)
	var once sync.Once
	hook.after = func(target string, p relayserver.Page) {
		if target != b.pub() || len(p.Items) != 0 {
			return
		}
		once.Do(func() {
			code, body, err := callURL(bg, r.ts.URL, &a, r.clock.Now(), "POST", "/v2/relay/items",
				mustJSON(t, mbx.PushRequest{Items: []mbx.PushItem{envItem(id, b)}}))
			if err == nil && (code != 200 || !strings.Contains(string(body), `"accepted"`)) {
				err = fmt.Errorf("push = %d %s", code, body)
			}
			pushed <- err
		})
	}
	p := pageOf(t, await(t, r.pollAsync(bg, b, "/v2/relay/items?after=0&wait=30")))
	if err := <-pushed; err != nil {
		t.Fatal(err)
	}
	if got := ids(p); len(got) != 1 || got[0] != id {
		t.Fatalf("pull = %v, want [%s], committed while it was reading", got, id)
	}
}

func TestLongPollWaitExpires(t *testing.T) {
	t.Parallel()
	r, tm, a, b, _ := longPollRelay(t, nil)
	resp := r.push(a, envItem("01KKNTQ2CN9WJ3MR4Q1P12F0B1", b))
	seq := resp.Results[0].Targets[0].Seq
	poll := r.pollAsync(bg, b, fmt.Sprintf("/v2/relay/items?after=%d&wait=5", seq))
	ft := tm.parked(t)
	pending(t, poll)
	ft.fire()
	p := pageOf(t, await(t, poll))
	if len(p.Items) != 0 || p.LastSeq != seq || p.HeadSeq != seq || p.More || p.Epoch != r.srv.Epoch() {
		t.Fatalf("expired pull = %+v, want an empty page at head %d", p, seq)
	}
	if n := r.srv.ParkedPulls(); n != 0 {
		t.Fatalf("parked pulls after expiry = %d, want 0", n)
	}
}

func TestLongPollQuery(t *testing.T) {
	t.Parallel()
	r, tm, a, b, _ := longPollRelay(t, nil)
	// Waits beyond the cap are cut to it.
	poll := r.pollAsync(bg, b, "/v2/relay/items?after=0&wait=3600")
	ft := tm.parked(t)
	if ft.d != relayserver.DefaultMaxWait {
		t.Fatalf("wait=3600 parked for %v, want the cap %v", ft.d, relayserver.DefaultMaxWait)
	}
	ft.fire()
	await(t, poll)
	// A page with items answers at once; so do no wait, wait=0, and a stale epoch.
	r.push(a, envItem("01KKNTQ2CN9WJ3MR4Q1P12F0B1", b))
	for _, c := range []struct {
		path  string
		code  int
		items int
	}{
		{"/v2/relay/items?after=0&wait=30", 200, 1},
		{"/v2/relay/items?after=" + fmt.Sprint(r.clock.Now().UnixMilli()), 200, 0},
		{"/v2/relay/items?after=" + fmt.Sprint(r.clock.Now().UnixMilli()) + "&wait=0", 200, 0},
		{"/v2/relay/items?after=0&epoch=old&wait=30", http.StatusConflict, 0},
		{"/v2/relay/items?after=0&wait=-1", http.StatusBadRequest, 0},
		{"/v2/relay/items?after=0&wait=1.5", http.StatusBadRequest, 0},
		{"/v2/relay/items?after=0&wait=x", http.StatusBadRequest, 0},
	} {
		code, body := r.call(&b, "GET", c.path, nil)
		if code != c.code {
			t.Fatalf("%s = %d %s, want %d", c.path, code, body, c.code)
		}
		if code == 200 {
			if p := decode[mbx.PullResponse](t, body); len(p.Items) != c.items {
				t.Fatalf("%s = %d items, want %d", c.path, len(p.Items), c.items)
			}
		}
		tm.none(t)
	}
	// info announces the cap; 0.5.x clients see the limits they know, unchanged.
	code, body := r.call(nil, "GET", "/v2/relay/info", nil)
	if code != 200 || !strings.Contains(string(body), `"max_wait":30`) {
		t.Fatalf("info = %d %s, want limits.max_wait 30", code, body)
	}
	if info := decode[mbx.InfoResponse](t, body); info.Limits != announcedDefaults() {
		t.Fatalf("info limits = %+v, want the defaults", info.Limits)
	}
}

func TestLongPollDisabled(t *testing.T) {
	t.Parallel()
	r, tm, _, b, _ := longPollRelay(t, func(o *relayserver.Options) { o.MaxWait = -1 })
	if code, body := r.call(&b, "GET", "/v2/relay/items?after=0&wait=30", nil); code != 200 {
		t.Fatalf("pull = %d %s", code, body)
	}
	tm.none(t)
	if _, body := r.call(nil, "GET", "/v2/relay/info", nil); strings.Contains(string(body), "max_wait") {
		t.Fatalf("info of a relay without long polling = %s, want no max_wait", body)
	}
}

// TestLongPollRotation parks a pull by a key and one by the key it rotates to: the rotation
// answers the new key's pull with the moved queue and the old key's with 403 (revoked).
func TestLongPollRotation(t *testing.T) {
	t.Parallel()
	r, tm, a, b, _ := longPollRelay(t, nil)
	resp := r.push(a, envItem("01KKNTQ69NA67N0QBPXKXFN501", b))
	seq := resp.Results[0].Targets[0].Seq
	next := newHost(t, "beta", 30)
	r.enrol(next)
	oldPoll := r.pollAsync(bg, b, fmt.Sprintf("/v2/relay/items?after=%d&wait=30", seq)) // beta has read it, not acked
	tm.parked(t)
	newPoll := r.pollAsync(bg, next, "/v2/relay/items?after=0&wait=30")
	tm.parked(t)
	r.rotate(b, next)
	p := pageOf(t, await(t, newPoll))
	if got := ids(p); len(got) != 1 || got[0] != "01KKNTQ69NA67N0QBPXKXFN501" {
		t.Fatalf("new key's pull = %+v, want the moved item", p)
	}
	if a := await(t, oldPoll); a.code != http.StatusForbidden {
		t.Fatalf("old key's parked pull = %d %s, want 403", a.code, a.body)
	}
}

func TestLongPollCaps(t *testing.T) {
	t.Parallel()
	r, tm, a, b, g := longPollRelay(t, func(o *relayserver.Options) {
		o.MaxWaiting, o.MaxWaitingPerKey = 2, 1
	})
	first := r.pollAsync(bg, b, "/v2/relay/items?after=0&wait=30")
	tm.parked(t)
	// A second pull of beta evicts the first, which answers at once with an empty page.
	second := r.pollAsync(bg, b, "/v2/relay/items?after=0&wait=30")
	if p := pageOf(t, await(t, first)); len(p.Items) != 0 {
		t.Fatalf("evicted pull = %+v, want an empty page", p)
	}
	tm.parked(t)
	gamma := r.pollAsync(bg, g, "/v2/relay/items?after=0&wait=30")
	tm.parked(t)
	if n := r.srv.ParkedPulls(); n != 2 {
		t.Fatalf("parked pulls = %d, want 2", n)
	}
	// The table is full: alpha's pull answers at once, as without wait.
	if code, body := r.call(&a, "GET", "/v2/relay/items?after=0&wait=30", nil); code != 200 {
		t.Fatalf("pull past the cap = %d %s", code, body)
	}
	tm.none(t)
	if n := r.srv.ParkedPulls(); n != 2 {
		t.Fatalf("parked pulls = %d, want 2", n)
	}
	// Once gamma's pull is answered, there is room again.
	r.push(a, envItem("01KKNTQ2CN9WJ3MR4Q1P12F0G1", g))
	if p := pageOf(t, await(t, gamma)); len(p.Items) != 1 {
		t.Fatalf("gamma's pull = %+v", p)
	}
	third := r.pollAsync(bg, a, "/v2/relay/items?after=0&wait=30")
	tm.parked(t)
	r.srv.Shutdown()
	await(t, second)
	await(t, third)
}

func TestLongPollClientGoesAway(t *testing.T) {
	t.Parallel()
	r, tm, _, b, _ := longPollRelay(t, nil)
	ctx, cancel := context.WithCancel(bg)
	poll := r.pollAsync(ctx, b, "/v2/relay/items?after=0&wait=30")
	tm.parked(t)
	cancel()
	if a := <-poll; !errors.Is(a.err, context.Canceled) {
		t.Fatalf("cancelled pull = %d %v", a.code, a.err)
	}
	deadline := time.Now().Add(failsafe)
	for r.srv.ParkedPulls() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the pull of a client that went away is still parked")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestLongPollShutdownAndEpoch runs Serve: a graceful shutdown answers a parked pull at once
// (Serve's shutdown would otherwise time out), and after a restart that rotated the epoch the
// client's next long poll in the old epoch gets 409 with the new one, without waiting.
func TestLongPollShutdownAndEpoch(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tm := newTimers()
	b := newHost(t, "beta", 2)
	serve := func(now time.Time, run func(base string)) {
		ctx, cancel := context.WithCancel(bg)
		defer cancel()
		cfg := serveConfig(dir, mbx.SigningKey{}, now, nil)
		cfg.Options.WaitTimer = tm.start
		cfg.ShutdownTimeout = failsafe
		base, done := startServe(ctx, t, cfg)
		run(base)
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("Serve's shutdown: %v", err)
			}
		case <-time.After(2 * failsafe):
			t.Fatal("Serve did not return")
		}
	}
	var epoch string
	var parked <-chan answer
	serve(t0, func(base string) {
		if err := enrolAt(base, b, t0); err != nil {
			t.Fatal(err)
		}
		ch := make(chan answer, 1)
		go func() {
			code, body, err := callURL(bg, base, &b, t0, "GET", "/v2/relay/items?after=0&wait=30", nil)
			ch <- answer{code, body, err}
		}()
		tm.parked(t)
		parked = ch
	})
	// Serve returned without error: the parked pull did not hold up the shutdown.
	p := pageOf(t, await(t, parked))
	if len(p.Items) != 0 || p.Epoch == "" {
		t.Fatalf("pull answered at shutdown = %+v", p)
	}
	epoch = p.Epoch
	later := t0.Add(mbx.RelayHeartbeatStale + time.Minute)
	serve(later, func(base string) {
		code, body, err := callURL(bg, base, &b, later, "GET", "/v2/relay/items?after=0&wait=30&epoch="+epoch, nil)
		if err != nil {
			t.Fatal(err)
		}
		e := decode[mbx.ErrorResponse](t, body)
		if code != http.StatusConflict || e.Epoch == "" || e.Epoch == epoch {
			t.Fatalf("long poll in the old epoch = %d %s, want 409 with a new epoch", code, body)
		}
		tm.none(t)
	})
}

// enrolAt enrols h at the relay at base.
func enrolAt(base string, h host, now time.Time) error {
	code, b, err := callURL(bg, base, nil, now, "POST", "/v1/relay/challenge",
		[]byte(fmt.Sprintf(`{"host":%q,"pubkey":%q}`, h.name, h.pub())))
	if err != nil || code != 200 {
		return fmt.Errorf("challenge: %d %s %v", code, b, err)
	}
	var c mbx.ChallengeResponse
	if err := json.Unmarshal(b, &c); err != nil {
		return err
	}
	req, err := mbx.SignEnrolment(h.key, h.name, c.Challenge, "")
	if err != nil {
		return err
	}
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	if code, b, err = callURL(bg, base, nil, now, "POST", "/v1/relay/enrol", body); err != nil || code != 200 {
		return fmt.Errorf("enrol: %d %s %v", code, b, err)
	}
	return nil
}

func TestParseWait(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   string
		max  time.Duration
		want time.Duration
		bad  bool
	}{
		{"", 30 * time.Second, 0, false},
		{"0", 30 * time.Second, 0, false},
		{"7", 30 * time.Second, 7 * time.Second, false},
		{"30", 30 * time.Second, 30 * time.Second, false},
		{"31", 30 * time.Second, 30 * time.Second, false},
		{"99999999999999999", 30 * time.Second, 30 * time.Second, false},
		{"5", -1, 0, false},
		{"-1", 30 * time.Second, 0, true},
		{"1e3", 30 * time.Second, 0, true},
		{" 5", 30 * time.Second, 0, true},
		{"999999999999999999999", 30 * time.Second, 0, true},
	} {
		got, err := relayserver.ParseWait(c.in, c.max)
		if (err != nil) != c.bad || got != c.want {
			t.Errorf("parseWait(%q, %v) = %v, %v; want %v, error %v", c.in, c.max, got, err, c.want, c.bad)
		}
		if err != nil && !errors.Is(err, relayserver.ErrBadRequest) {
			t.Errorf("parseWait(%q) error %v is not ErrBadRequest", c.in, err)
		}
	}
}

// updateHook is a Store whose Update runs a hook after the caller's unit, inside the transaction,
// before the commit.
type updateHook struct {
	relayserver.Store
	after func()
}

func (h *updateHook) Update(ctx context.Context, fn func(relayserver.Tx) error) error {
	return h.Store.Update(ctx, func(tx relayserver.Tx) error {
		err := fn(tx)
		if h.after != nil {
			h.after()
		}
		return err
	})
}

// TestLongPollWokenByPushWhoseClientLeft: the pusher goes away after its item was written and
// before the commit. The item commits all the same, so the pull parked for the target must be
// woken by that commit, not left waiting out its whole wait.
func TestLongPollWokenByPushWhoseClientLeft(t *testing.T) {
	t.Parallel()
	tm := newTimers()
	hook := &updateHook{}
	r, a, b := hookedRelay(t, tm, func(s relayserver.Store) relayserver.Store { hook.Store = s; return hook })
	poll := r.pollAsync(bg, b, "/v2/relay/items?after=0&wait=30")
	tm.parked(t)

	const id = "01KKNTQ2CN9WJ3MR4Q1P12F0B1"
	body := mustJSON(t, mbx.PushRequest{Items: []mbx.PushItem{envItem(id, b)}})
	req := httptest.NewRequest("POST", "/v2/relay/items", bytes.NewReader(body))
	for k, v := range mbx.SignRelayHop(a.key, a.name, "POST", "/v2/relay/items", body, r.clock.Now(), true) {
		req.Header[k] = v
	}
	ctx, leave := context.WithCancel(bg)
	hook.after = func() { leave(); <-ctx.Done() } // the client is gone before the commit
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.srv.ServeHTTP(httptest.NewRecorder(), req.WithContext(ctx))
	}()
	select {
	case <-done:
	case <-time.After(failsafe):
		t.Fatal("the push did not finish")
	}
	hook.after = nil
	p := pageOf(t, await(t, poll))
	if got := ids(p); len(got) != 1 || got[0] != id {
		t.Fatalf("parked pull = %+v, want the item whose pusher left", p)
	}
}
