package main

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/doctor"
	"github.com/agentmbx/agentmbx/relayserver"
)

// A refused enrolment stops relay use (relay status exits 1); an enrolment that failed because
// the relay was down is retried and does not.
func TestRelayStatusTellsRefusedFromTransient(t *testing.T) {
	base := api.RelayStatus{Configured: true, URL: "https://relay.example", Fingerprint: "1a2b-3c4d-5e6f-7a8b", Daemon: true}
	cases := []struct {
		name      string
		problem   api.RelayProblem
		blocked   bool
		wantState string
	}{
		{"refused", api.RelayProblem{Op: "enrol", Error: "relayclient: enrol: relay answered 403 Forbidden: enrolment denied", Kind: api.RelayRefused},
			true, "STOPPED: the relay refused the enrolment: relayclient: enrol: relay answered 403"},
		{"relay down", api.RelayProblem{Op: "enrol", Error: "relayclient: enrol: relay unreachable: connection refused", Kind: api.RelayTransient},
			false, "waiting: the last enrolment failed and is retried: relayclient: enrol: relay unreachable"},
		{"recorded before kinds", api.RelayProblem{Op: "enrol", Error: "relayclient: enrol: relay unreachable"},
			false, "waiting: the last enrolment failed and is retried"},
		{"a pull refused", api.RelayProblem{Op: "pull", Error: "relayclient: pull: relay answered 403 Forbidden", Kind: api.RelayRefused},
			false, "in use"},
	}
	for _, tc := range cases {
		st := base
		st.Problems = []api.RelayProblem{tc.problem}
		if got := relayBlocked(st) != ""; got != tc.blocked {
			t.Errorf("%s: blocked = %v, want %v", tc.name, got, tc.blocked)
		}
		var out bytes.Buffer
		if err := printRelayStatus(&out, st, "../my home"); err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(out.String(), "\n") {
			if fix, ok := strings.CutPrefix(l, "fix:"); ok {
				checkFixLine(t, strings.TrimSpace(fix), "../my home")
			}
		}
		if !strings.Contains(out.String(), "state:         "+tc.wantState) {
			t.Errorf("%s: status printed\n%s\nwant state %q", tc.name, out.String(), tc.wantState)
		}
	}
}

// checkOf returns the doctor check id of rep.
func checkOf(t *testing.T, rep doctor.Report, id string) doctor.Check {
	t.Helper()
	for _, c := range rep.Checks {
		if c.ID == id {
			return c
		}
	}
	t.Fatalf("doctor has no check %s: %+v", id, rep.Checks)
	return doctor.Check{}
}

// End to end: an enrolment that fails because the relay cannot be reached at that moment (a
// proxy in front of a real relay process drops the enrolment's connections) is a transient
// problem: relay status exits 0 and says it is retried, doctor warns. Once the relay is reached
// and refuses the enrolment (it requires account tokens, this host has none), relay use stops:
// relay status exits 1, doctor fails.
func TestE2EEnrolmentUnreachableIsNotRefused(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test")
	}
	dir := e2eDir(t)
	jwksURL, _ := e2eTokenIssuer(t)
	relay := startRelay(t, filepath.Join(dir, "relay.addr"), []string{relayserver.EnvRelayKey + "="},
		"--store-dir", filepath.Join(dir, "relay"), "--listen", "127.0.0.1:0",
		"--auth-issuer", e2eIssuer, "--auth-jwks-url", jwksURL, "--auth-jwks-loopback-http", "--auth-audience", e2eAudience, "--auth-required")
	target, err := url.Parse("http://" + relay.addr)
	if err != nil {
		t.Fatal(err)
	}
	var drop atomic.Bool
	drop.Store(true)
	rp := httputil.NewSingleHostReverseProxy(target)
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if drop.Load() && strings.HasSuffix(r.URL.Path, "/challenge") {
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				conn.Close() // as a relay that went down between info and enrol
			}
			return
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(proxy.Close)

	a := newNode(t, dir, "alpha")
	a.must("relay", "set", proxy.URL)
	a.start()
	a.waitFor("a failed enrolment", func() (bool, string) {
		return enrolFailing(a.relayStatus()) != "", a.run("relay", "status").stdout
	})
	r := a.run("relay", "status")
	if r.code != 0 || !strings.Contains(r.stdout, "waiting: the last enrolment failed and is retried") || strings.Contains(r.stdout, "STOPPED") {
		t.Fatalf("relay status with the enrolment unreachable: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	rep, _ := a.doctorRun()
	if c := checkOf(t, rep, "relay.enrol"); c.Status != doctor.Warn || !strings.Contains(c.Summary, "retries") {
		t.Fatalf("doctor relay.enrol with the enrolment unreachable = %+v", c)
	}

	// The relay is reached again and refuses: no account token.
	drop.Store(false)
	a.waitFor("the enrolment refused", func() (bool, string) {
		return enrolRefusal(a.relayStatus()) != "", a.run("relay", "status").stdout
	})
	r = a.run("relay", "status")
	if r.code != 1 || !strings.Contains(r.stdout, "STOPPED: the relay refused the enrolment") || !strings.Contains(r.stdout, "account token only") {
		t.Fatalf("relay status refused: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	rep, _ = a.doctorRun()
	if c := checkOf(t, rep, "relay.enrol"); c.Status != doctor.Fail || !strings.Contains(c.Summary, "refused") {
		t.Fatalf("doctor relay.enrol refused = %+v", c)
	}
	if c := checkOf(t, rep, "relay.account"); c.Status != doctor.OK || !strings.Contains(c.Summary, "no account token set") {
		t.Fatalf("doctor relay.account = %+v", c)
	}
}
