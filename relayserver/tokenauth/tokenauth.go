// Package tokenauth is the relay's account-token enrolment authority: a host enrols with a
// short-lived JWT from an accounts service, verified offline against the issuer's JWKS
// (golang-jwt/jwt/v5 with MicahParks/keyfunc/v3). The token proves the host's account and org and
// is bound to the host key that signs the hops by cnf.jkt, the RFC 7638 thumbprint of that key
// (see Thumbprint).
package tokenauth

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/MicahParks/keyfunc/v3"
	"github.com/golang-jwt/jwt/v5"
	"golang.org/x/time/rate"

	"github.com/agentmbx/agentmbx/internal/logkey"
	"github.com/agentmbx/agentmbx/relayserver"
)

// Defaults of Config.
const (
	DefaultMaxLifetime     = 15 * time.Minute
	DefaultRefreshInterval = 10 * time.Minute
	DefaultUnknownKIDEvery = time.Minute
	DefaultCacheLifetime   = time.Hour
	// maxJWKSBytes bounds the issuer's JWKS document.
	maxJWKSBytes = 1 << 20
)

// Config configures an Authority. Issuer, JWKSURL and Audience are required.
type Config struct {
	Issuer string
	// JWKSURL is the issuer's JWKS: an https URL (see CheckJWKSURL). Redirects are not followed.
	JWKSURL string
	// AllowLoopbackHTTP admits a plain http JWKSURL whose host is loopback (a test issuer, or
	// one behind a local TLS proxy); http to any other host is refused even with it.
	AllowLoopbackHTTP bool
	Audience          string // this relay's URL; tokens for any other audience are refused
	// Required refuses hosts without a token; otherwise they enrol by the host-key challenge, the
	// weaker authority, and prove no account.
	Required bool

	MaxLifetime     time.Duration // exp-iat at most this (DefaultMaxLifetime)
	RefreshInterval time.Duration // JWKS refreshed this often (DefaultRefreshInterval)
	UnknownKIDEvery time.Duration // a token with an unknown kid refreshes at most this often
	// CacheLifetime: when the JWKS cannot be fetched, the keys of the last good fetch serve this
	// long after it; then new enrolments fail closed (DefaultCacheLifetime).
	CacheLifetime time.Duration
	Clock         func() time.Time
	Client        *http.Client // for the JWKS (http.DefaultClient's transport)
	Logger        *slog.Logger
}

// Authority implements relayserver.EnrolmentAuthority.
type Authority struct {
	cfg     Config
	kf      keyfunc.Keyfunc
	parser  *jwt.Parser
	fetched atomic.Int64 // unix nanos of the last JWKS fetch that replaced the keys; 0 never
}

// Name implements relayserver.EnrolmentAuthority.
func (*Authority) Name() string { return "token" }

// Rank implements relayserver.EnrolmentAuthority: above the host-key challenge.
func (*Authority) Rank() int { return 10 }

// Claims are the token's claims.
type Claims struct {
	jwt.RegisteredClaims
	Account  string `json:"account"`
	Org      string `json:"org"`
	ClientID string `json:"client_id"`
	Cnf      struct {
		JKT string `json:"jkt"`
	} `json:"cnf"`
}

// New fetches the issuer's JWKS (a failure is logged, not fatal: enrolments fail closed until a
// fetch succeeds) and keeps refreshing it until ctx ends.
func New(ctx context.Context, cfg Config) (*Authority, error) {
	if cfg.Issuer == "" || cfg.JWKSURL == "" || cfg.Audience == "" {
		return nil, errors.New("tokenauth: issuer, JWKS URL and audience are all required")
	}
	if err := CheckJWKSURL(cfg.JWKSURL, cfg.AllowLoopbackHTTP); err != nil {
		return nil, fmt.Errorf("tokenauth: %w", err)
	}
	cfg = withDefaults(cfg)
	a := &Authority{cfg: cfg}
	store, err := jwkset.NewStorageFromHTTP(cfg.JWKSURL, jwkset.HTTPClientStorageOptions{
		Client:                    cfg.Client,
		Ctx:                       ctx,
		HTTPTimeout:               10 * time.Second,
		NoErrorReturnFirstHTTPReq: true,
		RefreshInterval:           cfg.RefreshInterval,
		RefreshErrorHandler: func(_ context.Context, err error) {
			cfg.Logger.Warn("account tokens: JWKS refresh failed; cached keys serve",
				logkey.URL, cfg.JWKSURL, logkey.Err, err)
		},
		Storage: &recordingStore{MemoryJWKSet: jwkset.NewMemoryStorage(), onReplace: a.markFetched},
	})
	if err != nil {
		return nil, fmt.Errorf("tokenauth: JWKS %s: %w", cfg.JWKSURL, err)
	}
	client, err := jwkset.NewHTTPClient(jwkset.HTTPClientOptions{
		HTTPURLs: map[string]jwkset.Storage{cfg.JWKSURL: store},
		// Also the budget of the refresh itself. A refresh due later than this is not waited for:
		// the token is refused at once (rate.Limiter.Wait fails early past the deadline).
		RateLimitWaitMax:  5 * time.Second,
		RefreshUnknownKID: rate.NewLimiter(rate.Every(cfg.UnknownKIDEvery), 1),
	})
	if err != nil {
		return nil, fmt.Errorf("tokenauth: %w", err)
	}
	if a.kf, err = keyfunc.New(keyfunc.Options{Ctx: ctx, Storage: client}); err != nil {
		return nil, fmt.Errorf("tokenauth: %w", err)
	}
	a.parser = jwt.NewParser(
		jwt.WithValidMethods([]string{"EdDSA", "ES256", "ES384", "RS256", "PS256"}),
		jwt.WithIssuer(cfg.Issuer), jwt.WithAudience(cfg.Audience),
		jwt.WithExpirationRequired(), jwt.WithIssuedAt(), jwt.WithTimeFunc(cfg.Clock))
	return a, nil
}

func withDefaults(c Config) Config {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.MaxLifetime, DefaultMaxLifetime)
	def(&c.RefreshInterval, DefaultRefreshInterval)
	def(&c.UnknownKIDEvery, DefaultUnknownKIDEvery)
	def(&c.CacheLifetime, DefaultCacheLifetime)
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	base := http.DefaultTransport
	if c.Client != nil && c.Client.Transport != nil {
		base = c.Client.Transport
	}
	// A redirect is not followed: the 3xx is the answer, and a failed fetch. The keys that decide
	// who enrols come from the URL the operator named, over TLS, or not at all.
	c.Client = &http.Client{Transport: boundedTransport{base},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return c
}

// CheckJWKSURL checks a JWKS URL: https with a host, or, when allowLoopbackHTTP, http to a
// loopback host (localhost, 127.0.0.0/8, ::1). The keys fetched there decide which tokens verify,
// so plain http to anything else would let the network choose who enrols.
func CheckJWKSURL(raw string, allowLoopbackHTTP bool) error {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || u.Hostname() == "" {
		return fmt.Errorf("JWKS URL %q is not an absolute URL with a host", raw)
	}
	switch u.Scheme {
	case "https":
		return nil
	case "http":
		if !isLoopback(u.Hostname()) {
			return fmt.Errorf("JWKS URL %q: plain http is refused (use https)", raw)
		}
		if !allowLoopbackHTTP {
			return fmt.Errorf("JWKS URL %q: plain http is refused (use https; loopback http only when allowed explicitly)", raw)
		}
		return nil
	}
	return fmt.Errorf("JWKS URL %q: scheme %q (want https)", raw, u.Scheme)
}

func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.Unmap().IsLoopback()
}

func (a *Authority) markFetched() { a.fetched.Store(a.cfg.Clock().UnixNano()) }

// KeysFresh reports whether the cached JWKS is young enough to verify new enrolments.
func (a *Authority) KeysFresh() bool {
	at := a.fetched.Load()
	return at != 0 && a.cfg.Clock().Sub(time.Unix(0, at)) <= a.cfg.CacheLifetime
}

// Authorize implements relayserver.EnrolmentAuthority. The relay's deny list (by host key and by
// the client_id returned here) is checked by the relay itself, for every authority.
func (a *Authority) Authorize(ctx context.Context, req relayserver.AuthRequest) (relayserver.AuthDecision, error) {
	if req.Proof == "" {
		if a.cfg.Required {
			return refuse("this relay admits hosts by account token only (relay set --token-file)")
		}
		dec, err := relayserver.HostKeyAuthority{}.Authorize(ctx, req)
		dec.By = relayserver.HostKeyAuthority{}
		return dec, err
	}
	if !a.KeysFresh() {
		return refuse("the account issuer's keys are unavailable; try again later")
	}
	c, err := a.verify(ctx, req.Proof, req.HostPubkey)
	if err != nil {
		return refuse("account token refused: " + err.Error())
	}
	// The account rights last as long as the token: past its exp the enrolment has host-key
	// rights (none with Required) until the host enrols again with a fresh token.
	return relayserver.AuthDecision{OK: true, Account: c.Account, Org: c.Org, ClientID: c.ClientID,
		Until: c.ExpiresAt.Time}, nil
}

// ProofRequired implements relayserver.ProofRequirer: with Required, a host without a valid
// token has no rights.
func (a *Authority) ProofRequired() bool { return a.cfg.Required }

func refuse(reason string) (relayserver.AuthDecision, error) {
	return relayserver.AuthDecision{Reason: reason}, nil
}

// verify checks the token's signature and every claim; errors name the claim, never the token.
func (a *Authority) verify(ctx context.Context, token, hostPubkey string) (*Claims, error) {
	var c Claims
	tok, err := a.parser.ParseWithClaims(token, &c, a.kf.KeyfuncCtx(ctx))
	if errors.Is(err, jwt.ErrTokenUnverifiable) && tok != nil {
		// The keyfunc's error says too much about our cache; the kid is the host's to know.
		return nil, fmt.Errorf("no key of the issuer has kid %q (unknown, removed, or a refresh is not due)", tok.Header["kid"])
	}
	if err != nil {
		return nil, err
	}
	switch {
	case c.Subject == "":
		return nil, errors.New("no sub")
	case c.Account == "":
		return nil, errors.New("no account")
	case c.Org == "":
		return nil, errors.New("no org")
	case c.ClientID == "":
		return nil, errors.New("no client_id")
	case c.ID == "":
		return nil, errors.New("no jti")
	case c.IssuedAt == nil:
		return nil, errors.New("no iat")
	case c.ExpiresAt.Sub(c.IssuedAt.Time) > a.cfg.MaxLifetime:
		return nil, fmt.Errorf("lifetime over %s", a.cfg.MaxLifetime)
	}
	jkt, err := Thumbprint(hostPubkey)
	if err != nil {
		return nil, err
	}
	if c.Cnf.JKT != jkt {
		return nil, errors.New("cnf.jkt does not bind this host key")
	}
	return &c, nil
}

// Thumbprint is the RFC 7638 JWK thumbprint (SHA-256, base64url without padding) of the host's
// Ed25519 public key (standard base64 of the raw 32 bytes, as on the wire) as an OKP JWK: the
// hash of {"crv":"Ed25519","kty":"OKP","x":"<base64url of the 32 bytes>"}. An issuer puts it in
// the token's cnf.jkt.
func Thumbprint(hostPubkey string) (string, error) {
	raw, err := base64.StdEncoding.DecodeString(hostPubkey)
	if err != nil || len(raw) != 32 {
		return "", errors.New("the host key is not a base64 Ed25519 public key")
	}
	canon := `{"crv":"Ed25519","kty":"OKP","x":"` + base64.RawURLEncoding.EncodeToString(raw) + `"}`
	sum := sha256.Sum256([]byte(canon))
	return base64.RawURLEncoding.EncodeToString(sum[:]), nil
}

// recordingStore notes each successful JWKS fetch: jwkset replaces the keys only after a fetch
// that decoded and parsed, so a key that left the JWKS stops verifying at that refresh.
type recordingStore struct {
	*jwkset.MemoryJWKSet
	onReplace func()
}

func (s *recordingStore) KeyReplaceAll(ctx context.Context, given []jwkset.JWK) error {
	if err := s.MemoryJWKSet.KeyReplaceAll(ctx, given); err != nil {
		return err
	}
	s.onReplace()
	return nil
}

// boundedTransport caps the JWKS body.
type boundedTransport struct{ base http.RoundTripper }

func (t boundedTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.LimitReader(resp.Body, maxJWKSBytes), resp.Body}
	return resp, nil
}
