package main

import (
	"context"
	"crypto/rand"
	"errors"
	"net/http"
	"path/filepath"
	"testing"

	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/relayclient"
	"github.com/agentmbx/agentmbx/relayserver"
)

// headerTransport adds fixed headers to every request: the proxy in front of the relay, as a
// test stands in for it on loopback.
type headerTransport map[string]string

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range h {
		r.Header.Set(k, v)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// TestRelayBehindASimulatedProxy: a real relay process with --trust-proxy cloudflare (as behind
// Cloudflare, or an edge that sets CF-Connecting-IP) counts each client by that header, not by the
// proxy's own address: with one new enrolment per address a day, a second key from one client
// address is refused (429) while a key from another address is enrolled, all arriving from
// 127.0.0.1; an X-Forwarded-For header, which that proxy does not vouch for, changes nothing.
// Without --trust-proxy the headers are ignored and every request is the proxy's address.
func TestRelayBehindASimulatedProxy(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test")
	}
	for _, tc := range []struct {
		mode    string
		trusted bool
	}{{"cloudflare", true}, {"none", false}} {
		t.Run(tc.mode, func(t *testing.T) {
			dir := e2eDir(t)
			relay := startRelay(t, filepath.Join(dir, "relay.addr"), []string{relayserver.EnvRelayKey + "="},
				"--store-dir", filepath.Join(dir, "relay"), "--listen", "127.0.0.1:0",
				"--trust-proxy", tc.mode, "--new-enrolments-per-day", "1")
			url := "http://" + relay.addr
			info := relayInfoOf(t, url)
			enrol := func(headers map[string]string) error {
				t.Helper()
				key, err := mbx.GenerateSigningKey(rand.Reader)
				if err != nil {
					t.Fatal(err)
				}
				c, err := relayclient.New(relayclient.Pin{URL: url, RelayKey: info.RelayPubkey}, "h"+key.Fingerprint()[:4], key,
					&relayclient.Options{HTTPClient: &http.Client{Transport: headerTransport(headers)}})
				if err != nil {
					t.Fatal(err)
				}
				return c.Enrol(context.Background(), "", "")
			}
			limited := func(err error) bool { return errors.Is(err, relayclient.ErrRateLimited) }
			if err := enrol(map[string]string{"CF-Connecting-IP": "203.0.113.7"}); err != nil {
				t.Fatalf("first enrolment from 203.0.113.7: %v", err)
			}
			err := enrol(map[string]string{"CF-Connecting-IP": "203.0.113.7", "X-Forwarded-For": "192.0.2.1"})
			if !limited(err) {
				t.Fatalf("second new key from 203.0.113.7 (a spoofed X-Forwarded-For beside it): %v, want 429", err)
			}
			err = enrol(map[string]string{"CF-Connecting-IP": "198.51.100.9"})
			if tc.trusted && err != nil {
				t.Fatalf("a key from another client address behind the proxy: %v", err)
			}
			if !tc.trusted && !limited(err) {
				t.Fatalf("without --trust-proxy the header counted: %v, want 429 (every request is 127.0.0.1)", err)
			}
		})
	}
}
