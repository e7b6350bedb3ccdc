package relayserver_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"testing/synctest"
	"time"

	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/relayserver"
	"github.com/agentmbx/agentmbx/relayserver/sqlitestore"
)

// The relay's documented defaults, each checked on a relay built with the option left unset,
// against the value the docs state (written here, not taken from the package's constants; the
// command's test checks that `relay serve --help` prints the same): docs/security.md, "A relay on
// the open internet": "only what arrived is charged, within a relay-wide budget of body bytes in
// flight (--body-budget, 64 MiB; large bodies leave an eighth for small ones...)", "requests in flight per client address
// (--max-per-client, 16)", "new host keys per address and day (--new-enrolments-per-day, 20)";
// docs/relay.md: "Each relay process reads the list every 5 s"; README: pushes_per_minute
// "default 120".
const (
	docBodyBudget      = 64 << 20
	docMaxPerClient    = 16
	docEnrolmentsDay   = 20
	docDenyPollEvery   = 5 * time.Second
	docPushesPerMinute = 120
)

// Sixteen requests with a body from one address are held; the seventeenth is refused unread.
func TestDefaultRequestsInFlightPerAddress(t *testing.T) {
	t.Parallel()
	r, a, _, _ := setup(t, nil)
	for range docMaxPerClient {
		r.hold(t, &a, "/v2/relay/items", 1000, "")
	}
	waitFor(t, "the holders admitted", func() bool { return r.srv.RequestsInFlight("127.0.0.1") == docMaxPerClient })
	over := r.hold(t, &a, "/v2/relay/items", 1000, "").answer()
	if over.StatusCode != http.StatusServiceUnavailable || over.Header.Get("Retry-After") == "" {
		t.Fatalf("request %d in flight from one address = %d, want 503 with Retry-After", docMaxPerClient+1, over.StatusCode)
	}
	if got := r.srv.RequestsInFlight("127.0.0.1"); got != docMaxPerClient {
		t.Fatalf("%d requests in flight after the refusal, want %d", got, docMaxPerClient)
	}
}

// The body budget, charged as bytes arrive: bodies over 64 KiB may hold 7/8 of it. Seven pushes
// of 8 MiB (the push cap), each sent but for its last byte (so each holds its whole 8 MiB buffer
// less the first 512 bytes, which are not charged), fit; then a body of 128 KiB no longer does.
// Both together bound the budget to between 63.99 and 64.14 MiB. Every holder has an address of
// its own (X-Forwarded-For) and at most two share a key, so the per-address and per-key shares
// (a quarter each) stay out of the way.
func TestDefaultBodyBudget(t *testing.T) {
	t.Parallel()
	r, a, b, g := setup(t, func(o *relayserver.Options) { o.TrustProxy = relayserver.TrustXFF })
	d := newHost(t, "delta", 4)
	r.enrol(d)
	const large, charged, last = mbx.RelayMaxBody, mbx.RelayMaxBody - 512, 128 << 10
	holders := []host{a, a, b, b, g, g, d}
	if len(holders) != docBodyBudget*7/8/large {
		t.Fatalf("%d holders of %d bytes for 7/8 of %d", len(holders), large, docBodyBudget)
	}
	for i, h := range holders {
		c := r.hold(t, &h, "/v2/relay/items", large, fmt.Sprintf("10.0.0.%d", i+1))
		c.send(large - 1)
	}
	held := int64(len(holders) * charged)
	waitFor(t, fmt.Sprintf("%d bytes held", held), func() bool { return r.srv.BodyBytesInFlight() == held })
	c := r.hold(t, &d, "/v2/relay/items", last, "10.0.0.8")
	_ = c.conn.SetWriteDeadline(time.Now().Add(ioDeadline))
	_, _ = c.conn.Write(bytes.Repeat([]byte{' '}, last-1)) // the relay may answer and close before the end
	if resp := c.answer(); resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("a 128 KiB body past 7/8 of the budget = %d, want 503", resp.StatusCode)
	}
	if got := r.srv.BodyBytesInFlight(); got != held {
		t.Fatalf("after the refusal the budget holds %d, want the seven's %d", got, held)
	}
}

// Twenty new host keys a day from one address; the twenty-first waits for the next day. Each
// enrolment comes a minute after the last, so the per-minute limit of enrolment calls stays out
// of the way.
func TestDefaultNewEnrolmentsPerDay(t *testing.T) {
	t.Parallel()
	r := newRelay(t, func(o *relayserver.Options) { o.TrustProxy = relayserver.TrustXFF })
	for i := range docEnrolmentsDay {
		if code := r.enrolFrom(t, "203.0.113.20", newHost(t, fmt.Sprintf("h%d", i), uint64(100+i))); code != http.StatusOK {
			t.Fatalf("new key %d of the day = %d, want 200", i+1, code)
		}
		r.clock.Advance(time.Minute)
	}
	late := newHost(t, "late", 199)
	if code := r.enrolFrom(t, "203.0.113.20", late); code != http.StatusTooManyRequests {
		t.Fatalf("new key %d of the day = %d, want 429", docEnrolmentsDay+1, code)
	}
	r.clock.Advance(24 * time.Hour)
	if code := r.enrolFrom(t, "203.0.113.20", late); code != http.StatusOK {
		t.Fatalf("the same key the next day = %d, want 200", code)
	}
}

// A relay announces 120 pushes a minute and holds a sender to it: 120 pushes pass at once, the
// next is refused with rejected:rate, and the bucket refills at 2 a second.
func TestDefaultPushesPerMinute(t *testing.T) {
	t.Parallel()
	r, a, b, _ := setup(t, nil)
	code, body := r.call(nil, "GET", "/v2/relay/info", nil)
	if info := decode[mbx.InfoResponse](t, body); code != http.StatusOK || info.Limits.PushesPerMinute != docPushesPerMinute {
		t.Fatalf("info = %d, pushes_per_minute %d; want %d announced", code, info.Limits.PushesPerMinute, docPushesPerMinute)
	}
	ids := mbx.NewULIDs(seeded(7))
	pushes := func() int {
		t.Helper()
		for i := range 1000 {
			if st := statuses(r.push(a, envItem(ids.New(r.clock.Now()), b))); st[0] != "accepted" {
				if st[0] != mbx.StatusRejectedPrefix+relayserver.RejectRate {
					t.Fatalf("push %d = %v, want accepted or rejected:rate", i+1, st)
				}
				return i
			}
		}
		t.Fatal("1000 pushes, none refused")
		return 0
	}
	if n := pushes(); n != docPushesPerMinute {
		t.Fatalf("%d pushes before the first rejected:rate, want %d", n, docPushesPerMinute)
	}
	r.clock.Advance(30 * time.Second)
	if n := pushes(); n != docPushesPerMinute/2 {
		t.Fatalf("%d pushes 30 s later, want %d", n, docPushesPerMinute/2)
	}
}

// The deny list is read every 5 s, on the relay's own schedule (RunDenyWatch with the option
// unset), in simulated time: an entry added just after a read applies at the next one, not a
// moment before.
func TestDefaultDenyPollEvery(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		st, err := sqlitestore.Open(ctx, t.TempDir(), nil)
		if err != nil {
			t.Fatal(err)
		}
		srv, err := relayserver.New(ctx, st, relayserver.Options{Key: keyFor(t, 0), Version: "test"})
		if err != nil {
			t.Fatal(err)
		}
		beta, gamma := newHost(t, "beta", 2), newHost(t, "gamma", 3)
		for _, h := range []host{beta, gamma} {
			enrolIn(t, srv, h)
		}
		wctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); srv.RunDenyWatch(wctx) }()
		synctest.Wait() // the watch has started its clock
		for _, h := range []host{beta, gamma} {
			d, err := relayserver.NewDenyEntry(relayserver.DenyHost, mbx.Fingerprint(h.pub()), time.Now(), 0, "test")
			if err != nil {
				t.Fatal(err)
			}
			if err := relayserver.AddDeny(ctx, st, d); err != nil {
				t.Fatal(err)
			}
			time.Sleep(docDenyPollEvery - time.Millisecond)
			synctest.Wait()
			if code := pullIn(srv, h); code != http.StatusOK {
				t.Fatalf("%s's pull %v after its entry = %d, want 200 (read every %v)", h.name, docDenyPollEvery-time.Millisecond, code, docDenyPollEvery)
			}
			time.Sleep(time.Millisecond)
			synctest.Wait()
			if code := pullIn(srv, h); code != http.StatusForbidden {
				t.Fatalf("%s's pull %v after its entry = %d, want 403 (read every %v)", h.name, docDenyPollEvery, code, docDenyPollEvery)
			}
		}
		cancel()
		<-done
		srv.Shutdown()
		st.Close()
	})
}

// serveIn answers one request in process (no network: the synctest bubble's clock may move),
// signed as a v2 hop of h when h is not nil.
func serveIn(srv *relayserver.Server, h *host, method, path string, body []byte) (int, []byte) {
	req := httptest.NewRequest(method, "http://relay"+path, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if h != nil {
		for k, v := range mbx.SignRelayHop(h.key, h.name, method, mbx.RelaySignedPath(req.URL), body, time.Now(), true) {
			req.Header[k] = v
		}
	}
	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, req)
	return rec.Code, rec.Body.Bytes()
}

func enrolIn(t *testing.T, srv *relayserver.Server, h host) {
	t.Helper()
	code, b := serveIn(srv, nil, "POST", "/v1/relay/challenge", mustJSON(t, mbx.ChallengeRequest{Host: h.name, Pubkey: h.pub()}))
	if code != http.StatusOK {
		t.Fatalf("challenge of %s = %d %s", h.name, code, b)
	}
	req, err := mbx.SignEnrolment(h.key, h.name, decode[mbx.ChallengeResponse](t, b).Challenge, "")
	if err != nil {
		t.Fatal(err)
	}
	if code, b := serveIn(srv, nil, "POST", "/v1/relay/enrol", mustJSON(t, req)); code != http.StatusOK {
		t.Fatalf("enrol %s = %d %s", h.name, code, b)
	}
}

func pullIn(srv *relayserver.Server, h host) int {
	code, _ := serveIn(srv, &h, "GET", "/v2/relay/items?after=0", nil)
	return code
}
