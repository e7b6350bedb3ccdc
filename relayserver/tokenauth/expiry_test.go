package tokenauth_test

// Issue 25, finding 6: an account token's exp bounds the rights it proved after enrolment. On a
// relay that requires tokens the host must present a fresh one; on one that does not, the
// enrolment falls back to host-key rights.

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/internal/testkit"
	"github.com/agentmbx/agentmbx/mbx"
)

const pullPath = "/v2/relay/items?after=0"

func (r *tokenRelay) infoAccount(h mbx.SigningKey) (string, bool) {
	r.t.Helper()
	code, body := r.do(&h, "GET", "/v2/relay/info", nil)
	if code != 200 {
		r.t.Fatalf("info = %d %s", code, body)
	}
	var info mbx.InfoResponse
	if err := json.Unmarshal([]byte(body), &info); err != nil {
		r.t.Fatal(err)
	}
	if info.You == nil {
		return "", false
	}
	return info.You.Account, true
}

func TestExpiredTokenMustBeRenewedWhenRequired(t *testing.T) {
	t.Parallel()
	r := newTokenRelay(t, true)
	host, honest := hostKey(t, 1), hostKey(t, 2)
	stale := r.is.sign("k1", r.is.valid(host)) // exp: 5 minutes from now
	if code, body := r.enrol(host, "beta", stale); code != 200 {
		t.Fatalf("enrol = %d %s", code, body)
	}
	if code, body := r.do(&host, "GET", pullPath, nil); code != 200 {
		t.Fatalf("pull within the token's life = %d %s", code, body)
	}
	r.is.clock.Advance(5*time.Minute + time.Second)
	if code, body := r.enrol(honest, "gamma", r.is.sign("k1", r.is.valid(honest))); code != 200 {
		t.Fatalf("an honest host's enrolment = %d %s", code, body)
	}

	// Past exp the enrolment has no rights left: its hops are refused with the reason, and info
	// does not name it.
	code, body := r.do(&host, "GET", pullPath, nil)
	if code != http.StatusForbidden || !strings.Contains(body, "expired") || !strings.Contains(body, "fresh token") {
		t.Fatalf("pull past the token's exp = %d %s, want 403 asking for a fresh token", code, body)
	}
	if _, named := r.infoAccount(host); named {
		t.Fatal("info names a host whose token expired")
	}
	if code, body := r.do(&honest, "GET", pullPath, nil); code != 200 {
		t.Fatalf("the honest host's pull = %d %s", code, body)
	}
	// The expired token does not enrol it again, and neither does the host-key challenge.
	if code, _ := r.enrol(host, "beta", stale); code != http.StatusForbidden {
		t.Fatalf("enrol again with the expired token = %d, want 403", code)
	}
	if code, _ := r.enrol(host, "beta", ""); code != http.StatusForbidden {
		t.Fatalf("enrol again without a token = %d, want 403", code)
	}
	// A fresh token does.
	if code, body := r.enrol(host, "beta", r.is.sign("k1", r.is.valid(host))); code != 200 {
		t.Fatalf("enrol with a fresh token = %d %s", code, body)
	}
	if acct, _ := r.infoAccount(host); acct != "acme" {
		t.Fatalf("info account after the fresh token = %q, want acme", acct)
	}

	// A rotation carries the token's exp to the new key: it does not extend the rights.
	r.is.clock.Advance(time.Minute)
	next := hostKey(t, 3)
	enc, err := mbx.GenerateEncKey(testkit.Rand(9))
	if err != nil {
		t.Fatal(err)
	}
	rot, err := mbx.SignRotation("beta", host, next, enc.PublicKey(), r.is.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	if code, body := r.do(nil, "POST", "/v2/relay/rotate", map[string]any{"rotation": rot}); code != 200 {
		t.Fatalf("rotate = %d %s", code, body)
	}
	if code, body := r.do(&next, "GET", pullPath, nil); code != 200 {
		t.Fatalf("the rotated key's pull within the token's life = %d %s", code, body)
	}
	r.is.clock.Advance(4*time.Minute + time.Second)
	if code, body := r.do(&next, "GET", pullPath, nil); code != http.StatusForbidden || !strings.Contains(body, "expired") {
		t.Fatalf("the rotated key's pull past the token's exp = %d %s, want 403", code, body)
	}
}

func TestExpiredTokenFallsBackToHostKeyRights(t *testing.T) {
	t.Parallel()
	r := newTokenRelay(t, false)
	host, other := hostKey(t, 1), hostKey(t, 2)
	if code, body := r.enrol(host, "beta", r.is.sign("k1", r.is.valid(host))); code != 200 {
		t.Fatalf("enrol = %d %s", code, body)
	}
	if acct, _ := r.infoAccount(host); acct != "acme" {
		t.Fatalf("info account = %q, want acme", acct)
	}
	r.is.clock.Advance(5*time.Minute + time.Second)

	// Past exp the host is still served, with host-key rights: no account.
	if code, body := r.do(&host, "GET", pullPath, nil); code != 200 {
		t.Fatalf("pull past the token's exp = %d %s, want 200 (host-key rights)", code, body)
	}
	if acct, named := r.infoAccount(host); !named || acct != "" {
		t.Fatalf("info past exp: account %q (named %v), want the host with no account", acct, named)
	}
	// The host-key challenge now overwrites the expired grant; the client_id stays for the deny
	// list.
	if code, body := r.enrol(host, "beta", ""); code != 200 {
		t.Fatalf("enrol by the host-key challenge = %d %s", code, body)
	}
	e, err := r.store.Enrolment(context.Background(), host.PublicKey())
	if err != nil || e.Account != "" || e.AuthorizedBy != "host-key" || e.ClientID != "cli-1" || !e.AuthUntil.IsZero() {
		t.Fatalf("enrolment = %+v, %v; want host-key rights keeping client_id cli-1", e, err)
	}
	// Its name left acme's namespace: another acme host may take it.
	if code, body := r.enrol(other, "beta", r.is.sign("k1", r.is.valid(other))); code != 200 {
		t.Fatalf("another acme host named beta = %d %s", code, body)
	}
	// A fresh token gives the account back.
	if code, body := r.enrol(host, "delta", r.is.sign("k1", r.is.valid(host))); code != 200 {
		t.Fatalf("enrol with a fresh token = %d %s", code, body)
	}
	if acct, _ := r.infoAccount(host); acct != "acme" {
		t.Fatalf("info account after the fresh token = %q, want acme", acct)
	}
}
