package tokenauth_test

import (
	"context"
	"crypto/ed25519"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/golang-jwt/jwt/v5"

	"github.com/agentmbx/agentmbx/internal/testkit"
	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/relayserver"
	"github.com/agentmbx/agentmbx/relayserver/tokenauth"
)

const (
	issuer   = "https://accounts.example"
	audience = "https://relay.example"
)

// testIssuer signs tokens and serves its JWKS on loopback; the served set can be changed or
// taken down.
type testIssuer struct {
	t       *testing.T
	keys    map[string]ed25519.PrivateKey
	jwks    atomic.Value // []byte
	down    atomic.Bool
	fetches atomic.Int64
	srv     *httptest.Server
	clock   *testkit.Clock
}

func newIssuer(t *testing.T, c *testkit.Clock, kids ...string) *testIssuer {
	is := &testIssuer{t: t, keys: map[string]ed25519.PrivateKey{}, clock: c}
	for i, kid := range kids {
		_, priv, err := ed25519.GenerateKey(testkit.Rand(uint64(100 + i)))
		if err != nil {
			t.Fatal(err)
		}
		is.keys[kid] = priv
	}
	is.serve(kids[:1]...)
	is.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		is.fetches.Add(1)
		if is.down.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(is.jwks.Load().([]byte))
	}))
	t.Cleanup(is.srv.Close)
	return is
}

// serve publishes exactly the public keys of kids.
func (is *testIssuer) serve(kids ...string) {
	ctx := context.Background()
	set := jwkset.NewMemoryStorage()
	for _, kid := range kids {
		jwk, err := jwkset.NewJWKFromKey(is.keys[kid].Public(), jwkset.JWKOptions{
			Metadata: jwkset.JWKMetadataOptions{KID: kid, ALG: jwkset.AlgEdDSA, USE: jwkset.UseSig}})
		if err != nil {
			is.t.Fatal(err)
		}
		if err := set.KeyWrite(ctx, jwk); err != nil {
			is.t.Fatal(err)
		}
	}
	raw, err := set.JSONPublic(ctx)
	if err != nil {
		is.t.Fatal(err)
	}
	is.jwks.Store([]byte(raw))
}

type claims = tokenauth.Claims

// valid is a token body for host, issued now for five minutes.
func (is *testIssuer) valid(host mbx.SigningKey) claims {
	now := is.clock.Now()
	jkt, err := tokenauth.Thumbprint(host.PublicKey())
	if err != nil {
		is.t.Fatal(err)
	}
	c := claims{Account: "acme", Org: "acme-org", ClientID: "cli-1"}
	c.Issuer, c.Subject, c.Audience, c.ID = issuer, "user-7", jwt.ClaimStrings{audience}, "jti-1"
	c.IssuedAt, c.ExpiresAt = jwt.NewNumericDate(now), jwt.NewNumericDate(now.Add(5*time.Minute))
	c.Cnf.JKT = jkt
	return c
}

func (is *testIssuer) sign(kid string, c claims) string {
	tok := jwt.NewWithClaims(jwt.SigningMethodEdDSA, c)
	tok.Header["kid"] = kid
	s, err := tok.SignedString(is.keys[kid])
	if err != nil {
		is.t.Fatal(err)
	}
	return s
}

func newAuthority(t *testing.T, is *testIssuer, mod func(*tokenauth.Config)) *tokenauth.Authority {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	cfg := tokenauth.Config{Issuer: issuer, JWKSURL: is.srv.URL, Audience: audience, Clock: is.clock.Now, AllowLoopbackHTTP: true}
	if mod != nil {
		mod(&cfg)
	}
	a, err := tokenauth.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func hostKey(t *testing.T, n uint64) mbx.SigningKey {
	k, err := mbx.GenerateSigningKey(testkit.Rand(n))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func authorize(t *testing.T, a *tokenauth.Authority, host mbx.SigningKey, token string) relayserver.AuthDecision {
	t.Helper()
	dec, err := a.Authorize(context.Background(), relayserver.AuthRequest{HostName: "beta", HostPubkey: host.PublicKey(), Proof: token})
	if err != nil {
		t.Fatalf("Authorize: %v", err)
	}
	return dec
}

func wantRefused(t *testing.T, dec relayserver.AuthDecision, reason string) {
	t.Helper()
	if dec.OK || !strings.Contains(dec.Reason, reason) {
		t.Fatalf("decision = %+v, want refused with %q", dec, reason)
	}
}

func setup(t *testing.T, mod func(*tokenauth.Config)) (*testIssuer, *tokenauth.Authority, mbx.SigningKey) {
	c := testkit.NewClock(time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC))
	is := newIssuer(t, c, "k1", "k2", "k3")
	return is, newAuthority(t, is, mod), hostKey(t, 1)
}

func TestValidTokenProvesAccountAndOrg(t *testing.T) {
	t.Parallel()
	is, a, host := setup(t, nil)
	dec := authorize(t, a, host, is.sign("k1", is.valid(host)))
	if !dec.OK || dec.Account != "acme" || dec.Org != "acme-org" || dec.ClientID != "cli-1" || dec.By != nil {
		t.Fatalf("decision = %+v, want acme/acme-org/cli-1 by the token authority", dec)
	}
	if a.Name() != "token" || a.Rank() <= (relayserver.HostKeyAuthority{}).Rank() {
		t.Fatalf("name %q rank %d: must outrank the host-key challenge", a.Name(), a.Rank())
	}
}

func TestEachClaimIsChecked(t *testing.T) {
	t.Parallel()
	is, a, host := setup(t, nil)
	other := hostKey(t, 2)
	cases := []struct {
		name   string
		mod    func(*claims)
		reason string
	}{
		{"expired", func(c *claims) {
			c.IssuedAt = jwt.NewNumericDate(is.clock.Now().Add(-10 * time.Minute))
			c.ExpiresAt = jwt.NewNumericDate(is.clock.Now().Add(-time.Minute))
		}, "expired"},
		{"issued in the future", func(c *claims) { c.IssuedAt = jwt.NewNumericDate(is.clock.Now().Add(time.Hour)) }, "before issued"},
		{"no exp", func(c *claims) { c.ExpiresAt = nil }, "exp claim is required"},
		{"no iat", func(c *claims) { c.IssuedAt = nil }, "no iat"},
		{"wrong audience", func(c *claims) { c.Audience = jwt.ClaimStrings{"https://other-relay.example"} }, "aud"},
		{"wrong issuer", func(c *claims) { c.Issuer = "https://evil.example" }, "iss"},
		{"lifetime over 15 min", func(c *claims) {
			c.ExpiresAt = jwt.NewNumericDate(c.IssuedAt.Add(15*time.Minute + time.Second))
		}, "lifetime over 15m0s"},
		{"cnf for another host key", func(c *claims) { c.Cnf.JKT, _ = tokenauth.Thumbprint(other.PublicKey()) }, "cnf.jkt"},
		{"no cnf", func(c *claims) { c.Cnf.JKT = "" }, "cnf.jkt"},
		{"no sub", func(c *claims) { c.Subject = "" }, "no sub"},
		{"no account", func(c *claims) { c.Account = "" }, "no account"},
		{"no org", func(c *claims) { c.Org = "" }, "no org"},
		{"no client_id", func(c *claims) { c.ClientID = "" }, "no client_id"},
		{"no jti", func(c *claims) { c.ID = "" }, "no jti"},
	}
	for _, tc := range cases {
		c := is.valid(host)
		tc.mod(&c)
		dec := authorize(t, a, host, is.sign("k1", c))
		if dec.OK || !strings.Contains(dec.Reason, tc.reason) {
			t.Errorf("%s: decision = %+v, want refused with %q", tc.name, dec, tc.reason)
		}
	}
	// Exactly 15 minutes is allowed.
	c := is.valid(host)
	c.ExpiresAt = jwt.NewNumericDate(c.IssuedAt.Add(15 * time.Minute))
	if dec := authorize(t, a, host, is.sign("k1", c)); !dec.OK {
		t.Fatalf("15-minute token: %+v", dec)
	}
}

func TestSignatureAndAlgorithmAreChecked(t *testing.T) {
	t.Parallel()
	is, a, host := setup(t, nil)
	good := is.sign("k1", is.valid(host))
	parts := strings.Split(good, ".")
	forged := parts[0] + "." + parts[1] + "." + strings.Repeat("A", len(parts[2]))
	wantRefused(t, authorize(t, a, host, forged), "signature")
	none := jwt.NewWithClaims(jwt.SigningMethodNone, is.valid(host))
	none.Header["kid"] = "k1"
	s, err := none.SignedString(jwt.UnsafeAllowNoneSignatureType)
	if err != nil {
		t.Fatal(err)
	}
	wantRefused(t, authorize(t, a, host, s), "signing method")
	wantRefused(t, authorize(t, a, host, "not-a-jwt"), "malformed")
}

func TestUnknownKidRefreshesOncePerMinuteAndRemovedKeysStop(t *testing.T) {
	t.Parallel()
	is, a, host := setup(t, nil)
	before := is.fetches.Load()
	// The issuer rotates to k2: a token signed by k2 makes the relay refresh and verify it.
	is.serve("k2")
	if dec := authorize(t, a, host, is.sign("k2", is.valid(host))); !dec.OK {
		t.Fatalf("token of the rotated key = %+v", dec)
	}
	if n := is.fetches.Load() - before; n != 1 {
		t.Fatalf("unknown kid fetched the JWKS %d times, want 1", n)
	}
	// k1 left the JWKS with that refresh: its tokens stop verifying at once.
	wantRefused(t, authorize(t, a, host, is.sign("k1", is.valid(host))), "k1")
	// Another unknown kid within the minute does not fetch again (the k1 try above did not either).
	is.serve("k2", "k3")
	wantRefused(t, authorize(t, a, host, is.sign("k3", is.valid(host))), "k3")
	if n := is.fetches.Load() - before; n != 1 {
		t.Fatalf("unknown kids fetched the JWKS %d times within a minute, want 1", n)
	}
}

func TestUnknownKidRefreshInterval(t *testing.T) {
	t.Parallel()
	// With a short interval (the default is a minute), the next unknown kid refreshes again.
	is, a, host := setup(t, func(c *tokenauth.Config) { c.UnknownKIDEvery = 50 * time.Millisecond })
	is.serve("k2")
	if dec := authorize(t, a, host, is.sign("k2", is.valid(host))); !dec.OK {
		t.Fatalf("k2 = %+v", dec)
	}
	is.serve("k3")
	deadline := time.Now().Add(10 * time.Second)
	for {
		dec := authorize(t, a, host, is.sign("k3", is.valid(host)))
		if dec.OK {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("k3 never verified after the limiter's interval: %+v", dec)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestJWKSDownCachedKeysServeThenFailClosed(t *testing.T) {
	t.Parallel()
	is, a, host := setup(t, nil)
	is.down.Store(true)
	is.clock.Advance(59 * time.Minute)
	if dec := authorize(t, a, host, is.sign("k1", is.valid(host))); !dec.OK {
		t.Fatalf("within the cache lifetime = %+v, want the cached key to serve", dec)
	}
	// An unknown kid while the JWKS is down finds nothing.
	wantRefused(t, authorize(t, a, host, is.sign("k2", is.valid(host))), "k2")
	is.clock.Advance(2 * time.Minute)
	wantRefused(t, authorize(t, a, host, is.sign("k1", is.valid(host))), "keys are unavailable")
	if a.KeysFresh() {
		t.Fatal("KeysFresh after the cache lifetime")
	}
}

func TestJWKSDownAtStartFailsClosed(t *testing.T) {
	t.Parallel()
	c := testkit.NewClock(time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC))
	is := newIssuer(t, c, "k1")
	is.down.Store(true)
	a := newAuthority(t, is, nil)
	host := hostKey(t, 1)
	wantRefused(t, authorize(t, a, host, is.sign("k1", is.valid(host))), "keys are unavailable")
}

func TestNoTokenFallsBackToHostKeyChallenge(t *testing.T) {
	t.Parallel()
	_, a, host := setup(t, nil)
	// Without a token the host-key challenge decides, and says so.
	dec := authorize(t, a, host, "")
	if !dec.OK || dec.Account != "" || dec.ClientID != "" || dec.By == nil || dec.By.Name() != "host-key" {
		t.Fatalf("no token = %+v, want the host-key authority", dec)
	}
}

func TestRequiredRefusesHostsWithoutToken(t *testing.T) {
	t.Parallel()
	_, a, host := setup(t, func(c *tokenauth.Config) { c.Required = true })
	wantRefused(t, authorize(t, a, host, ""), "account token only")
}

func TestThumbprintIsRFC7638(t *testing.T) {
	t.Parallel()
	// RFC 8037 appendix A.3: the thumbprint of its Ed25519 example key.
	pub := "11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo="
	got, err := tokenauth.Thumbprint(pub)
	if err != nil || got != "kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k" {
		t.Fatalf("Thumbprint = %q, %v", got, err)
	}
	if _, err := tokenauth.Thumbprint("short"); err == nil {
		t.Fatal("a bad key gave a thumbprint")
	}
}

func TestKeyLeavingTheJWKSStopsVerifyingAtThePeriodicRefresh(t *testing.T) {
	t.Parallel()
	// No unknown kid is involved: the periodic refresh alone drops k1 (10 min by default).
	is, a, host := setup(t, func(c *tokenauth.Config) { c.RefreshInterval = 20 * time.Millisecond })
	tok := is.sign("k1", is.valid(host))
	if dec := authorize(t, a, host, tok); !dec.OK {
		t.Fatalf("k1 before it left = %+v", dec)
	}
	is.serve("k2")
	deadline := time.Now().Add(10 * time.Second)
	for {
		dec := authorize(t, a, host, tok)
		if !dec.OK {
			wantRefused(t, dec, "k1")
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("a key that left the JWKS still verifies after the refreshes")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A JWKS URL must be https; plain http only to a loopback host and only when allowed (issue 25,
// finding 7). Each refusal happens in New, before anything is fetched.
func TestJWKSURLMustBeHTTPS(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		url      string
		loopback bool
		ok       bool
	}{
		{"https://accounts.example/jwks.json", false, true},
		{"http://accounts.example/jwks.json", false, false},
		{"http://accounts.example/jwks.json", true, false}, // the flag covers loopback only
		{"http://127.0.0.1:8080/jwks.json", false, false},  // loopback, but not allowed
		{"http://127.0.0.1:8080/jwks.json", true, true},
		{"http://[::1]:8080/jwks.json", true, true},
		{"http://localhost:8080/jwks.json", true, true},
		{"http://10.0.0.1/jwks.json", true, false},
		{"ftp://accounts.example/jwks.json", true, false},
		{"/jwks.json", true, false},
		{"https:///jwks.json", false, false},
	} {
		err := tokenauth.CheckJWKSURL(tc.url, tc.loopback)
		if (err == nil) != tc.ok {
			t.Errorf("CheckJWKSURL(%q, loopback http %v) = %v, want ok %v", tc.url, tc.loopback, err, tc.ok)
		}
		if tc.ok {
			continue
		}
		_, err = tokenauth.New(t.Context(), tokenauth.Config{Issuer: issuer, JWKSURL: tc.url, Audience: audience,
			AllowLoopbackHTTP: tc.loopback})
		if err == nil || !strings.Contains(err.Error(), "JWKS URL") {
			t.Errorf("New with JWKS URL %q (loopback http %v) = %v, want a refusal naming the URL", tc.url, tc.loopback, err)
		}
	}
}

// The JWKS is fetched over TLS from the URL the operator named, and a redirect is not followed:
// a JWKS URL that redirects (here to a host serving the issuer's real keys) gives no keys, and
// new enrolments fail closed.
func TestJWKSOverTLSAndRedirectNotFollowed(t *testing.T) {
	t.Parallel()
	c := testkit.NewClock(time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC))
	is := newIssuer(t, c, "k1")
	tlsJWKS := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/moved" {
			http.Redirect(w, r, is.srv.URL, http.StatusFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(is.jwks.Load().([]byte))
	}))
	t.Cleanup(tlsJWKS.Close)
	host := hostKey(t, 1)

	a, err := tokenauth.New(t.Context(), tokenauth.Config{Issuer: issuer, JWKSURL: tlsJWKS.URL + "/jwks.json",
		Audience: audience, Clock: c.Now, Client: tlsJWKS.Client()})
	if err != nil {
		t.Fatal(err)
	}
	if dec := authorize(t, a, host, is.sign("k1", is.valid(host))); !dec.OK {
		t.Fatalf("a token of the key served over https = %+v, want it admitted", dec)
	}

	moved, err := tokenauth.New(t.Context(), tokenauth.Config{Issuer: issuer, JWKSURL: tlsJWKS.URL + "/moved",
		Audience: audience, Clock: c.Now, Client: tlsJWKS.Client()})
	if err != nil {
		t.Fatal(err)
	}
	if moved.KeysFresh() {
		t.Fatal("a JWKS URL that redirects gave keys")
	}
	if n := is.fetches.Load(); n != 0 {
		t.Fatalf("the redirect's target was fetched %d times, want 0", n)
	}
	wantRefused(t, authorize(t, moved, host, is.sign("k1", is.valid(host))), "keys are unavailable")
}
