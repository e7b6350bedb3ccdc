package tokenauth_test

// The token authority inside a real relay (SQLite store, HTTP): the account and client_id a token
// proves are stored on the enrolment, and the relay's deny list by client_id refuses such tokens
// and ends the open long poll of a host enrolled with one.

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/internal/testkit"
	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/relayserver"
	"github.com/agentmbx/agentmbx/relayserver/sqlitestore"
	"github.com/agentmbx/agentmbx/relayserver/tokenauth"
)

type tokenRelay struct {
	t      *testing.T
	is     *testIssuer
	store  *sqlitestore.Store
	srv    *relayserver.Server
	url    string
	parked chan struct{} // a long poll started its timer
}

func newTokenRelay(t *testing.T, required bool) *tokenRelay {
	t.Helper()
	c := testkit.NewClock(time.Now().UTC()) // the hop window is checked against the relay's clock
	is := newIssuer(t, c, "k1")
	a := newAuthority(t, is, func(cfg *tokenauth.Config) { cfg.Required = required })
	st, err := sqlitestore.Open(context.Background(), t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	r := &tokenRelay{t: t, is: is, store: st, parked: make(chan struct{}, 8)}
	relayKey, err := mbx.GenerateSigningKey(testkit.Rand(500))
	if err != nil {
		t.Fatal(err)
	}
	r.srv, err = relayserver.New(context.Background(), st, relayserver.Options{Key: relayKey, Authority: a, Clock: c.Now,
		// A long poll's wait never ends by itself here: only the deny list can end it.
		WaitTimer: func(time.Duration) (<-chan time.Time, func() bool) {
			r.parked <- struct{}{}
			return make(chan time.Time), func() bool { return true }
		}})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(r.srv)
	t.Cleanup(func() { r.srv.Shutdown(); ts.Close(); st.Close() })
	r.url = ts.URL
	return r
}

func (r *tokenRelay) do(h *mbx.SigningKey, method, path string, body any) (int, string) {
	r.t.Helper()
	var raw []byte
	if body != nil {
		var err error
		if raw, err = json.Marshal(body); err != nil {
			r.t.Fatal(err)
		}
	}
	req, err := http.NewRequest(method, r.url+path, bytes.NewReader(raw))
	if err != nil {
		r.t.Fatal(err)
	}
	if h != nil {
		for k, v := range mbx.SignRelayHop(*h, "beta", method, mbx.RelaySignedPath(req.URL), raw, r.is.clock.Now(), true) {
			req.Header[k] = v
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		r.t.Errorf("%s %s: %v", method, path, err)
		return 0, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (r *tokenRelay) enrol(h mbx.SigningKey, name, token string) (int, string) {
	r.t.Helper()
	code, body := r.do(nil, "POST", "/v1/relay/challenge", mbx.ChallengeRequest{Host: name, Pubkey: h.PublicKey()})
	if code != 200 {
		return code, body
	}
	var c mbx.ChallengeResponse
	if err := json.Unmarshal([]byte(body), &c); err != nil {
		r.t.Fatal(err)
	}
	req, err := mbx.SignEnrolment(h, name, c.Challenge, "")
	if err != nil {
		r.t.Fatal(err)
	}
	req.Proof = token
	return r.do(nil, "POST", "/v1/relay/enrol", req)
}

func TestDeniedClientIDEndsLongPollAndIsRefused(t *testing.T) {
	t.Parallel()
	r := newTokenRelay(t, true)
	host := hostKey(t, 1)
	if code, body := r.enrol(host, "beta", r.is.sign("k1", r.is.valid(host))); code != 200 {
		t.Fatalf("enrol with a valid token = %d %s", code, body)
	}
	e, err := r.store.Enrolment(context.Background(), host.PublicKey())
	if err != nil || e.Account != "acme" || e.ClientID != "cli-1" || e.AuthorizedBy != "token" {
		t.Fatalf("enrolment = %+v, %v; want account acme and client_id cli-1 by token", e, err)
	}

	type answer struct {
		code int
		body string
	}
	done := make(chan answer, 1)
	go func() {
		code, body := r.do(&host, "GET", "/v2/relay/items?after=0&wait=30", nil)
		done <- answer{code, body}
	}()
	select {
	case <-r.parked:
	case <-time.After(20 * time.Second):
		t.Fatal("the long poll never parked")
	}
	d, err := relayserver.NewDenyEntry(relayserver.DenyClient, "cli-1", r.is.clock.Now(), 0, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := relayserver.AddDeny(context.Background(), r.store, d); err != nil {
		t.Fatal(err)
	}
	if err := r.srv.ReloadDeny(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case a := <-done:
		if a.code != http.StatusForbidden || !strings.Contains(a.body, "deny list") {
			t.Fatalf("the open long poll = %d %s, want 403 naming the deny list", a.code, a.body)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the deny list did not end the open long poll")
	}
	// A valid token of the denied client_id is refused for any host key.
	other := hostKey(t, 2)
	code, body := r.enrol(other, "gamma", r.is.sign("k1", r.is.valid(other)))
	if code != http.StatusForbidden || !strings.Contains(body, "this client is on the relay's deny list") {
		t.Fatalf("enrol with a denied client_id = %d %s", code, body)
	}
	// Another client of the same account is not. The denied host keeps its name in the account.
	c := r.is.valid(other)
	c.ClientID = "cli-2"
	if code, body := r.enrol(other, "beta", r.is.sign("k1", c)); code != http.StatusConflict || !strings.Contains(body, "name is taken") {
		t.Fatalf("another host taking the denied host's name = %d %s, want 409", code, body)
	}
	if code, body := r.enrol(other, "gamma", r.is.sign("k1", c)); code != 200 {
		t.Fatalf("enrol with another client_id = %d %s", code, body)
	}
}

func TestTokenAccountKeptAgainstTheHostKeyChallenge(t *testing.T) {
	t.Parallel()
	r := newTokenRelay(t, false)
	host := hostKey(t, 1)
	if code, body := r.enrol(host, "beta", r.is.sign("k1", r.is.valid(host))); code != 200 {
		t.Fatalf("enrol with a token = %d %s", code, body)
	}
	// The same key enrols again without a token: the weaker challenge does not overwrite the
	// account the token proved.
	if code, body := r.enrol(host, "beta", ""); code != 200 {
		t.Fatalf("enrol without a token = %d %s", code, body)
	}
	e, err := r.store.Enrolment(context.Background(), host.PublicKey())
	if err != nil || e.Account != "acme" || e.ClientID != "cli-1" || e.AuthorizedBy != "token" {
		t.Fatalf("enrolment = %+v, %v; want the token's account kept", e, err)
	}
	// The account drives name uniqueness: another key of acme cannot take "beta"; a host
	// without an account can.
	other := hostKey(t, 2)
	c := r.is.valid(other)
	if code, body := r.enrol(other, "BETA", r.is.sign("k1", c)); code != http.StatusConflict {
		t.Fatalf("another acme host named BETA = %d %s, want 409", code, body)
	}
	if code, body := r.enrol(other, "BETA", ""); code != 200 {
		t.Fatalf("a host without an account named BETA = %d %s", code, body)
	}
}
