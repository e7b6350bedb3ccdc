package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/relayserver"
)

// End to end: a serving relay process, a host enrolled with an account token, and the operator's
// `relay deny` run against the store while the relay serves it.
func TestE2ERelayDenyList(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test")
	}
	t.Setenv(relayserver.EnvRelayDir, "")
	dir := e2eDir(t)
	store := filepath.Join(dir, "relay")
	jwksURL, sign := e2eTokenIssuer(t)
	relay := startRelay(t, filepath.Join(dir, "relay.addr"), []string{relayserver.EnvRelayKey + "="},
		"--store-dir", store, "--listen", "127.0.0.1:0",
		"--auth-issuer", e2eIssuer, "--auth-jwks-url", jwksURL, "--auth-jwks-loopback-http", "--auth-audience", e2eAudience)
	a := newNode(t, dir, "alpha")
	tok := filepath.Join(dir, "alpha.token")
	writeFile(t, tok, sign(a.hostPubkey(), time.Now(), 15*time.Minute))
	a.must("relay", "set", "http://"+relay.addr, "--token-file", tok)
	a.start()
	a.waitFor("enrolment by token", func() (bool, string) {
		return a.relayStatus().Enrolled, a.run("relay", "status").stdout
	})

	// Bad input changes nothing.
	if _, _, err := runRelay(t, "deny", "add", "--store-dir", store, "--client-id", "cli-e2e", "--for", "5m"); err == nil ||
		!strings.Contains(err.Error(), "at least 15m0s") {
		t.Fatalf("deny add --for 5m = %v", err)
	}
	if _, _, err := runRelay(t, "deny", "add", "--store-dir", store); err == nil || !strings.Contains(err.Error(), "exactly one") {
		t.Fatalf("deny add without an entry = %v", err)
	}
	// The relay serves the store: the command writes the deny table beside it.
	out, _, err := runRelay(t, "deny", "add", "--store-dir", store, "--client-id", "cli-e2e", "--for", "20m", "--note", "leaked token")
	if err != nil || !strings.Contains(out, "denied client_id cli-e2e until ") {
		t.Fatalf("deny add = %q, %v", out, err)
	}
	out, _, err = runRelay(t, "deny", "list", "--store-dir", store)
	if err != nil || !strings.Contains(out, "client_id") || !strings.Contains(out, "cli-e2e") || !strings.Contains(out, "leaked token") {
		t.Fatalf("deny list = %q, %v", out, err)
	}
	// The relay applies it: the host's requests are refused, naming the deny list.
	a.waitFor("the host refused by the deny list", func() (bool, string) {
		st := a.relayStatus()
		for _, p := range st.Problems {
			if strings.Contains(p.Error, "deny list") {
				return true, ""
			}
		}
		return false, a.run("relay", "status").stdout
	})
	// A restarted host enrols again and is refused, clearly.
	a.stop()
	a.start()
	a.waitFor("the enrolment refused", func() (bool, string) {
		return strings.Contains(enrolRefusal(a.relayStatus()), "this client is on the relay's deny list"), a.run("relay", "status").stdout
	})

	// Removed: the host enrols again with its token.
	out, _, err = runRelay(t, "deny", "remove", "--store-dir", store, "--client-id", "cli-e2e")
	if err != nil || !strings.Contains(out, "removed client_id cli-e2e") {
		t.Fatalf("deny remove = %q, %v", out, err)
	}
	if _, _, err := runRelay(t, "deny", "remove", "--store-dir", store, "--client-id", "cli-e2e"); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("removing it twice = %v", err)
	}
	a.stop()
	a.start()
	a.waitFor("the enrolment after the removal", func() (bool, string) {
		st := a.relayStatus()
		return st.Enrolled && enrolRefusal(st) == "", a.run("relay", "status").stdout
	})
	relay.stop()

	// With the relay stopped the command opens the store itself.
	if out, _, err = runRelay(t, "deny", "add", "--store-dir", store, "--fingerprint", a.hostPubkey()); err != nil || !strings.Contains(out, "fingerprint") {
		t.Fatalf("deny add on a stopped relay's store = %q, %v", out, err)
	}
	if out, _, err = runRelay(t, "deny", "list", "--store-dir", store); err != nil || strings.Count(out, "\n") != 2 {
		t.Fatalf("deny list = %q, %v", out, err)
	}
}
