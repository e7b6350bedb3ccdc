package relayclient

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/mbx"
)

// t0 is the tests' clock: 2026-10-02T10:00:00Z.
var t0 = time.Date(2026, 10, 2, 10, 0, 0, 0, time.UTC)

func seeded(n uint64) io.Reader { return rand.NewChaCha8([32]byte{byte(n), byte(n >> 8), 9}) }

func keyFor(t testing.TB, n uint64) mbx.SigningKey {
	t.Helper()
	k, err := mbx.GenerateSigningKey(seeded(n))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func encKeyFor(t testing.TB, n uint64) mbx.EncKey {
	t.Helper()
	k, err := mbx.GenerateEncKey(seeded(500 + n))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// seen is one request the fake relay received.
type seen struct {
	method, path, signedPath string
	header                   http.Header
	body                     []byte
	hopErr                   error // the hop's verification against the host key (nil: valid)
}

// fake is a scriptable relay: each test installs handlers per "METHOD /path" and the fake
// records every request and checks its hop against the host key.
type fake struct {
	t        *testing.T
	relayKey mbx.SigningKey
	hostKey  mbx.SigningKey
	epoch    string
	srv      *httptest.Server

	mu       sync.Mutex
	handlers map[string]func(w http.ResponseWriter, r *http.Request, body []byte)
	reqs     []seen
}

func newFake(t *testing.T) *fake {
	f := &fake{t: t, relayKey: keyFor(t, 1), hostKey: keyFor(t, 2), epoch: "ep-1",
		handlers: map[string]func(http.ResponseWriter, *http.Request, []byte){}}
	f.handle("GET /v2/relay/info", func(w http.ResponseWriter, r *http.Request, _ []byte) {
		info := mbx.InfoResponse{V: 2, RelayPubkey: f.relayKey.PublicKey(), Epoch: f.epoch, Version: "fake", Limits: mbx.DefaultLimits()}
		if f.last().hopErr == nil && r.Header.Get(mbx.HeaderSig) != "" {
			info.You = &mbx.InfoCaller{Host: "alpha", Pubkey: f.hostKey.PublicKey(), HeadSeq: 7, AckedThrough: 3}
		}
		writeJSON(w, 200, info)
	})
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fake) handle(route string, h func(w http.ResponseWriter, r *http.Request, body []byte)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.handlers[route] = h
}

func (f *fake) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	sp := mbx.RelaySignedPath(r.URL)
	s := seen{method: r.Method, path: r.URL.Path, signedPath: sp, header: r.Header.Clone(), body: body}
	s.hopErr = mbx.VerifyRelayHop(f.hostKey.PublicKey(), r.Header, r.Method, sp, body, t0)
	f.mu.Lock()
	f.reqs = append(f.reqs, s)
	h := f.handlers[r.Method+" "+r.URL.Path]
	f.mu.Unlock()
	if h == nil {
		writeJSON(w, 404, mbx.ErrorResponse{Error: "no such endpoint"})
		return
	}
	h(w, r, body)
}

func (f *fake) last() seen {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reqs[len(f.reqs)-1]
}

func (f *fake) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.reqs)
}

func (f *fake) pin() Pin { return Pin{URL: f.srv.URL, RelayKey: f.relayKey.PublicKey()} }

func (f *fake) client(t *testing.T) *Client {
	t.Helper()
	c, err := New(f.pin(), "alpha", f.hostKey, &Options{Clock: func() time.Time { return t0 }, Timeout: 20 * time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}
