package relayserver_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/relayserver"
)

// clientAuthority stands in for the account-token authority: a proof "account/client" proves
// that account and client_id; no proof falls back to the host-key challenge.
type clientAuthority struct{}

func (clientAuthority) Name() string { return "token" }
func (clientAuthority) Rank() int    { return 10 }
func (clientAuthority) Authorize(ctx context.Context, req relayserver.AuthRequest) (relayserver.AuthDecision, error) {
	if req.Proof == "" {
		return relayserver.AuthDecision{OK: true, By: relayserver.HostKeyAuthority{}}, nil
	}
	account, client, _ := strings.Cut(req.Proof, "/")
	return relayserver.AuthDecision{OK: true, Account: account, Org: account, ClientID: client}, nil
}

func (r *relay) deny(kind relayserver.DenyKind, value string, life time.Duration) {
	r.t.Helper()
	d, err := relayserver.NewDenyEntry(kind, value, r.clock.Now(), life, "test")
	if err != nil {
		r.t.Fatal(err)
	}
	if err := relayserver.AddDeny(bg, r.store, d); err != nil {
		r.t.Fatal(err)
	}
}

func (r *relay) reloadDeny(srvs ...*relayserver.Server) {
	r.t.Helper()
	for _, s := range append([]*relayserver.Server{r.srv}, srvs...) {
		if err := s.ReloadDeny(bg); err != nil {
			r.t.Fatal(err)
		}
	}
}

func wantStatus(t *testing.T, what string, code int, body []byte, want int, text string) {
	t.Helper()
	if code != want || !strings.Contains(string(body), text) {
		t.Fatalf("%s = %d %s, want %d with %q", what, code, body, want, text)
	}
}

func TestDenyFingerprintEndsLongPollRevokesAndRefusesEnrolment(t *testing.T) {
	t.Parallel()
	r, tm, a, b, _ := longPollRelay(t, nil)
	poll := r.pollAsync(bg, b, "/v2/relay/items?after=0&wait=30")
	tm.parked(t)
	r.deny(relayserver.DenyHost, mbx.Fingerprint(b.pub()), 0)
	pending(t, poll) // not applied before the relay reads the list
	r.reloadDeny()
	ans := await(t, poll)
	wantStatus(t, "the open long poll", ans.code, ans.body, http.StatusForbidden, "deny list")

	// Its next requests fail clearly, a new enrolment is refused, and info no longer names it.
	code, body := r.call(&b, "GET", "/v2/relay/items?after=0", nil)
	wantStatus(t, "the next pull", code, body, http.StatusForbidden, "deny list revoked this enrolment")
	code, body = r.tryEnrol(b, "")
	wantStatus(t, "enrolment", code, body, http.StatusForbidden, "this host key is on the relay's deny list")
	_, body = r.call(&b, "GET", "/v2/relay/info", nil)
	if decode[mbx.InfoResponse](t, body).You != nil {
		t.Fatalf("info names the denied host: %s", body)
	}
	// Others are untouched; mail for the denied host is still queued for it.
	r.push(a, envItem("01KKNTQ69NA67N0QBPXKXFN501", b))
	r.pull(a, 0)

	// Removed: the revocation stays until the host enrols again, which now succeeds.
	if err := relayserver.RemoveDeny(bg, r.store, relayserver.DenyHost, b.pub()); err != nil {
		t.Fatal(err)
	}
	r.reloadDeny()
	code, body = r.call(&b, "GET", "/v2/relay/items?after=0", nil)
	wantStatus(t, "a pull after the removal, before enrolling", code, body, http.StatusForbidden, "enrol again")
	r.enrol(b)
	if got := ids(r.pull(b, 0)); len(got) != 1 {
		t.Fatalf("re-enrolled host pulls %v, want the mail queued meanwhile", got)
	}
}

func TestDenyClientIDRevokesItsEnrolmentsOnly(t *testing.T) {
	t.Parallel()
	r := newRelay(t, func(o *relayserver.Options) { o.Authority = clientAuthority{} })
	bad, good := newHost(t, "bad", 5), newHost(t, "good", 6)
	for _, e := range []struct {
		h     host
		proof string
	}{{bad, "acme/cli-bad"}, {good, "acme/cli-ok"}} {
		if code, body := r.tryEnrol(e.h, e.proof); code != 200 {
			t.Fatalf("enrol %s: %d %s", e.h.name, code, body)
		}
	}
	if e, _ := r.store.Enrolment(bg, bad.pub()); e.ClientID != "cli-bad" || e.Account != "acme" {
		t.Fatalf("enrolment = %+v, want the client_id and account stored", e)
	}
	r.deny(relayserver.DenyClient, "cli-bad", relayserver.MinDenyFor)
	r.reloadDeny()
	code, body := r.call(&bad, "GET", "/v2/relay/items?after=0", nil)
	wantStatus(t, "the denied client's pull", code, body, http.StatusForbidden, "deny list")
	r.pull(good, 0)

	// A new enrolment with the denied client_id is refused, whatever the key.
	code, body = r.tryEnrol(newHost(t, "other", 7), "acme/cli-bad")
	wantStatus(t, "enrolment of the denied client", code, body, http.StatusForbidden, "this client is on the relay's deny list")
	// Nor may the denied key enrol again by the host-key challenge (issue 25, finding 7).
	code, body = r.tryEnrol(bad, "")
	wantStatus(t, "host-key re-enrolment of the denied key", code, body, http.StatusForbidden, "this client is on the relay's deny list")
	code, body = r.call(&bad, "GET", "/v2/relay/items?after=0", nil)
	wantStatus(t, "the denied key's pull after trying", code, body, http.StatusForbidden, "deny list")
	// The entry ends after its life: the client enrols again; the key by the host-key challenge,
	// without inheriting the revoked account.
	r.clock.Advance(relayserver.MinDenyFor)
	code, body = r.tryEnrol(newHost(t, "other", 7), "acme/cli-bad")
	if code != 200 {
		t.Fatalf("enrolment after the entry ended = %d %s", code, body)
	}
	r.enrol(bad)
	if e, _ := r.store.Enrolment(bg, bad.pub()); e.Account != "" || e.AuthorizedBy != "host-key" || !e.DeniedAt.IsZero() {
		t.Fatalf("re-enrolled by the host-key challenge = %+v, want no account", e)
	}
	r.pull(bad, 0)
}

// A host-key re-enrolment before the entry does not wash the client_id off the key: the entry
// still revokes it, and refuses its next re-enrolment (issue 25, finding 7: the other order).
func TestDenyClientIDAfterHostKeyReEnrolment(t *testing.T) {
	t.Parallel()
	r := newRelay(t, func(o *relayserver.Options) { o.Authority = clientAuthority{} })
	bad, good := newHost(t, "bad", 5), newHost(t, "good", 6)
	if code, body := r.tryEnrol(bad, "acme/cli-bad"); code != 200 {
		t.Fatalf("enrol: %d %s", code, body)
	}
	r.enrol(good)
	r.enrol(bad) // by the host-key challenge, while the token's grant stands
	r.deny(relayserver.DenyClient, "cli-bad", relayserver.MinDenyFor)
	r.reloadDeny()
	code, body := r.call(&bad, "GET", "/v2/relay/items?after=0", nil)
	wantStatus(t, "the denied client's pull", code, body, http.StatusForbidden, "deny list")
	code, body = r.tryEnrol(bad, "")
	wantStatus(t, "host-key re-enrolment after the entry", code, body, http.StatusForbidden, "this client is on the relay's deny list")
	r.pull(good, 0) // an honest host is still served
}

// Host-key re-enrolments of a key racing the relay's application of a client_id entry: whichever
// runs first, the key ends denied and its next enrolment is refused.
func TestDenyClientIDRacesHostKeyReEnrolment(t *testing.T) {
	t.Parallel()
	for i := range 10 {
		r := newRelay(t, func(o *relayserver.Options) { o.Authority = clientAuthority{}; o.EnrolCallsPerMinute = -1 })
		bad := newHost(t, "bad", 5)
		if code, body := r.tryEnrol(bad, "acme/cli-bad"); code != 200 {
			t.Fatalf("enrol: %d %s", code, body)
		}
		r.deny(relayserver.DenyClient, "cli-bad", relayserver.MinDenyFor)
		done := make(chan struct{})
		go func() {
			defer close(done)
			for range 8 {
				r.tryEnrol(bad, "") // 200 before the entry applies, 403 after
			}
		}()
		r.reloadDeny()
		<-done
		code, body := r.call(&bad, "GET", "/v2/relay/items?after=0", nil)
		wantStatus(t, fmt.Sprintf("round %d: the denied key's pull", i), code, body, http.StatusForbidden, "deny list")
		code, body = r.tryEnrol(bad, "")
		wantStatus(t, fmt.Sprintf("round %d: its enrolment", i), code, body, http.StatusForbidden, "deny list")
	}
}

func TestDenyStopsRotationOutOfTheEntry(t *testing.T) {
	t.Parallel()
	r, _, b, _ := setup(t, nil)
	next := newHost(t, "beta", 30)
	r.deny(relayserver.DenyHost, mbx.Fingerprint(b.pub()), 0)
	r.reloadDeny()
	code, body := r.call(nil, "POST", "/v2/relay/rotate", r.rotationBody(b, next))
	wantStatus(t, "rotation of a denied key", code, body, http.StatusForbidden, "deny list")
	// Nor to a denied new key.
	c, other := newHost(t, "gamma", 3), newHost(t, "gamma", 31)
	r.deny(relayserver.DenyHost, mbx.Fingerprint(other.pub()), 0)
	r.reloadDeny()
	code, body = r.call(nil, "POST", "/v2/relay/rotate", r.rotationBody(c, other))
	wantStatus(t, "rotation to a denied key", code, body, http.StatusForbidden, "the new key is on the relay's deny list")
}

// Two servers over one store stand for replicas: the one that did not revoke still ends its own
// parked pulls when it reads the list.
func TestDenyEndsLongPollOnEveryReplica(t *testing.T) {
	t.Parallel()
	tm := newTimers()
	r, _, b, _ := setup(t, func(o *relayserver.Options) { o.WaitTimer = tm.start })
	o := relayserver.Options{Key: r.key, Clock: r.clock.Now, Rand: seeded(43), Version: "test", WaitTimer: tm.start}
	srv2, err := relayserver.New(bg, r.store, o)
	if err != nil {
		t.Fatal(err)
	}
	ts2 := httptest.NewServer(srv2)
	t.Cleanup(func() { srv2.Shutdown(); ts2.Close() })
	ch := make(chan answer, 1)
	go func() {
		code, body, err := callURL(bg, ts2.URL, &b, r.clock.Now(), "GET", "/v2/relay/items?after=0&wait=30", nil)
		ch <- answer{code, body, err}
	}()
	tm.parked(t)
	r.deny(relayserver.DenyHost, mbx.Fingerprint(b.pub()), 0)
	r.reloadDeny() // the first replica revokes
	pending(t, ch)
	r.reloadDeny(srv2)
	ans := await(t, ch)
	wantStatus(t, "the second replica's long poll", ans.code, ans.body, http.StatusForbidden, "deny list")
}

func TestRunDenyWatchAppliesEntriesItself(t *testing.T) {
	t.Parallel()
	r, _, b, _ := setup(t, func(o *relayserver.Options) { o.DenyPollEvery = 10 * time.Millisecond })
	ctx, cancel := context.WithCancel(bg)
	done := make(chan struct{})
	go func() { defer close(done); r.srv.RunDenyWatch(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	r.deny(relayserver.DenyHost, mbx.Fingerprint(b.pub()), 0)
	deadline := time.Now().Add(failsafe)
	for {
		code, _ := r.call(&b, "GET", "/v2/relay/items?after=0", nil)
		if code == http.StatusForbidden {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the watch never applied the entry")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestNewDenyEntryChecksItsInput(t *testing.T) {
	t.Parallel()
	now := t0
	k := keyFor(t, 1).PublicKey()
	d, err := relayserver.NewDenyEntry(relayserver.DenyHost, "ED25519:"+strings.ToUpper(mbx.Fingerprint(k)), now, time.Hour, "")
	if err != nil || d.Value != mbx.Fingerprint(k) || !d.Until.Equal(now.Add(time.Hour)) || !d.Matches(k, "") {
		t.Fatalf("NewDenyEntry = %+v, %v", d, err)
	}
	if d, err := relayserver.NewDenyEntry(relayserver.DenyHost, k, now, 0, ""); err != nil || !d.Until.IsZero() || !d.Active(now.Add(1000*time.Hour)) {
		t.Fatalf("from a key, until removed = %+v, %v", d, err)
	}
	for _, tc := range []struct {
		kind  relayserver.DenyKind
		value string
		life  time.Duration
		want  string
	}{
		{relayserver.DenyHost, "not-a-fingerprint", 0, "fingerprint"},
		{relayserver.DenyClient, "", 0, "client_id"},
		{relayserver.DenyClient, "a\nb", 0, "client_id"},
		{relayserver.DenyClient, "cli", 14 * time.Minute, "at least 15m0s"},
		{relayserver.DenyClient, "cli", -time.Hour, "negative"},
		{"account", "x", 0, "deny kind"},
	} {
		if _, err := relayserver.NewDenyEntry(tc.kind, tc.value, now, tc.life, ""); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewDenyEntry(%s, %q, %s) = %v, want an error with %q", tc.kind, tc.value, tc.life, err, tc.want)
		}
	}

}
