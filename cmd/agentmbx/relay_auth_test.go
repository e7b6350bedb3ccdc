package main

// End to end: a relay that admits hosts by account token only (relay serve --auth-*), a test
// issuer whose JWKS is served on loopback, and two host daemons that enrol with token files.

import (
	"context"
	"crypto/ed25519"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/golang-jwt/jwt/v5"

	"github.com/agentmbx/agentmbx/internal/testkit"
	"github.com/agentmbx/agentmbx/relayserver"
	"github.com/agentmbx/agentmbx/relayserver/tokenauth"
)

const (
	e2eIssuer   = "https://accounts.test"
	e2eAudience = "https://relay.test"
)

// e2eTokenIssuer serves one Ed25519 key as a JWKS on loopback and signs tokens with it.
func e2eTokenIssuer(t *testing.T) (jwksURL string, sign func(hostPubkey string, iat time.Time, life time.Duration) string) {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(testkit.Rand(77))
	if err != nil {
		t.Fatal(err)
	}
	set := jwkset.NewMemoryStorage()
	jwk, err := jwkset.NewJWKFromKey(priv.Public(), jwkset.JWKOptions{Metadata: jwkset.JWKMetadataOptions{KID: "e2e", ALG: jwkset.AlgEdDSA}})
	if err != nil {
		t.Fatal(err)
	}
	if err := set.KeyWrite(context.Background(), jwk); err != nil {
		t.Fatal(err)
	}
	raw, err := set.JSONPublic(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write(raw) }))
	t.Cleanup(srv.Close)
	return srv.URL, func(hostPubkey string, iat time.Time, life time.Duration) string {
		jkt, err := tokenauth.Thumbprint(hostPubkey)
		if err != nil {
			t.Fatal(err)
		}
		c := tokenauth.Claims{Account: "acme", Org: "acme-org", ClientID: "cli-e2e"}
		c.Issuer, c.Subject, c.Audience, c.ID = e2eIssuer, "user-1", jwt.ClaimStrings{e2eAudience}, "jti-"+hostPubkey[:8]
		c.IssuedAt, c.ExpiresAt = jwt.NewNumericDate(iat), jwt.NewNumericDate(iat.Add(life))
		c.Cnf.JKT = jkt
		tok := jwt.NewWithClaims(jwt.SigningMethodEdDSA, c)
		tok.Header["kid"] = "e2e"
		s, err := tok.SignedString(priv)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
}

func (n *node) hostPubkey() string {
	n.t.Helper()
	var id struct {
		HostPubkey string `json:"host_pubkey"`
	}
	n.mustJSON(&id, "id", "--json")
	if id.HostPubkey == "" {
		n.t.Fatalf("%s: id --json names no host key", n.name)
	}
	return id.HostPubkey
}

func TestE2ERelayAccountTokens(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test")
	}
	dir := e2eDir(t)
	jwksURL, sign := e2eTokenIssuer(t)
	relay := startRelay(t, filepath.Join(dir, "relay.addr"), []string{relayserver.EnvRelayKey + "="},
		"--store-dir", filepath.Join(dir, "relay"), "--listen", "127.0.0.1:0",
		"--auth-issuer", e2eIssuer, "--auth-jwks-url", jwksURL, "--auth-jwks-loopback-http", "--auth-audience", e2eAudience, "--auth-required")
	url := "http://" + relay.addr
	a, b, c := newNode(t, dir, "alpha"), newNode(t, dir, "beta"), newNode(t, dir, "gamma")

	// alpha: a valid token in a file; beta: an expired one; gamma: none at all.
	tokA, tokB := filepath.Join(dir, "alpha.token"), filepath.Join(dir, "beta.token")
	writeFile(t, tokA, sign(a.hostPubkey(), time.Now(), 10*time.Minute)+"\n")
	writeFile(t, tokB, sign(b.hostPubkey(), time.Now().Add(-20*time.Minute), 10*time.Minute))
	a.must("relay", "set", url, "--token-file", tokA)
	b.must("relay", "set", url, "--token-file", tokB)
	c.must("relay", "set", url)
	if r := a.run("relay", "set", url, "--token-file", filepath.Join(dir, "missing.token")); r.code == 0 || !strings.Contains(r.stderr, "token file") {
		t.Fatalf("relay set with a missing token file: exit %d, %q", r.code, r.stderr)
	}
	for _, n := range []*node{a, b, c} {
		n.start()
	}

	a.waitFor("enrolment by token", func() (bool, string) {
		st := a.relayStatus()
		return st.Enrolled && st.Account == "acme", a.must("relay", "status")
	})
	if out := a.must("relay", "status"); !regexp.MustCompile(`(?m)^account:\s+acme$`).MatchString(out) || strings.Contains(out, "EXPIRED") {
		t.Fatalf("alpha's relay status:\n%s", out)
	}
	b.waitFor("the expired token refused", func() (bool, string) {
		st := b.relayStatus()
		return !st.Enrolled && strings.Contains(enrolRefusal(st), "expired") && st.Token != nil && st.Token.Expired, b.run("relay", "status").stdout
	})
	if out := b.run("relay", "status").stdout; !strings.Contains(out, "EXPIRED") || !strings.Contains(out, "fresh account token") {
		t.Fatalf("beta's relay status:\n%s", out)
	}
	c.waitFor("no token refused", func() (bool, string) {
		return strings.Contains(enrolRefusal(c.relayStatus()), "account token only"), c.run("relay", "status").stdout
	})

	// The token file is read again at the next enrolment: a refreshed token admits beta.
	writeFile(t, tokB, sign(b.hostPubkey(), time.Now(), 10*time.Minute))
	b.stop()
	b.start()
	b.waitFor("enrolment with the refreshed token", func() (bool, string) {
		st := b.relayStatus()
		return st.Enrolled && st.Account == "acme" && enrolRefusal(st) == "", b.run("relay", "status").stdout
	})
}

func writeFile(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
}
