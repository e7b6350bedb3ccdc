package doctor

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/mbx"
)

var now = time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC)

// fakeHost is an api.Service and api.RelayService with fixed answers; only the methods doctor
// calls are implemented.
type fakeHost struct {
	api.Service
	status api.Status
	peers  []api.Peer
	rows   []api.OutboxRow
	relay  api.RelayStatus
	agents []api.Agent
}

func (f *fakeHost) Status(context.Context) (api.Status, error)           { return f.status, nil }
func (f *fakeHost) Peers(context.Context) ([]api.Peer, error)            { return f.peers, nil }
func (f *fakeHost) Agents(context.Context) ([]api.Agent, error)          { return f.agents, nil }
func (f *fakeHost) Outbox(context.Context) ([]api.OutboxRow, error)      { return f.rows, nil }
func (f *fakeHost) RelayStatus(context.Context) (api.RelayStatus, error) { return f.relay, nil }
func (f *fakeHost) RelaySet(context.Context, api.RelaySetRequest) (api.RelayStatus, error) {
	return api.RelayStatus{}, errors.New("not in doctor")
}
func (f *fakeHost) RelayUnset(context.Context) (api.RelayStatus, error) {
	return api.RelayStatus{}, errors.New("not in doctor")
}
func (f *fakeHost) RelayQuarantine(context.Context) ([]api.QuarantineItem, error) { return nil, nil }

func newKey(t *testing.T) mbx.SigningKey {
	t.Helper()
	k, err := mbx.GenerateSigningKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func newEnc(t *testing.T) mbx.EncKey {
	t.Helper()
	k, err := mbx.GenerateEncKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// home makes a host home with the files doctor looks at, in the modes init gives them.
func home(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "home")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{HostKeyFile, EncKeyFile, StateFile} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("{}"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// fakeRelay serves GET /v2/relay/info with key and epoch, and a Date header off by skew.
type fakeRelay struct {
	key   mbx.SigningKey
	epoch string
	skew  time.Duration
}

func (f *fakeRelay) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v2/relay/info" {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Date", now.Add(f.skew).UTC().Format(http.TimeFormat))
	json.NewEncoder(w).Encode(mbx.InfoResponse{V: 2, RelayPubkey: f.key.PublicKey(), Epoch: f.epoch, Version: "test", Limits: mbx.DefaultLimits()})
}

// noNetwork fails every request without sending it.
type noNetwork struct{}

func (noNetwork) RoundTrip(*http.Request) (*http.Response, error) {
	return nil, errors.New("no network in tests")
}

// world is a host with one relay-only peer and a relay it is enrolled at, all well.
type world struct {
	env   Env
	host  *fakeHost
	relay *fakeRelay
}

func newWorld(t *testing.T) *world {
	t.Helper()
	rk := newKey(t)
	fr := &fakeRelay{key: rk, epoch: "E1"}
	srv := httptest.NewServer(fr)
	t.Cleanup(srv.Close)
	hk := newKey(t)
	peer := newKey(t)
	fh := &fakeHost{
		status: api.Status{Host: "home", HostPubkey: hk.PublicKey(), Fingerprint: hk.Fingerprint(), Version: "v1", Daemon: true},
		peers:  []api.Peer{{Host: "work", HostPubkey: peer.PublicKey(), Fingerprint: peer.Fingerprint(), EncPub: newEnc(t).PublicKey()}},
		relay: api.RelayStatus{Configured: true, URL: srv.URL, RelayPubkey: rk.PublicKey(), Fingerprint: rk.Fingerprint(),
			PinnedAt: mbx.ISOTime(now.Add(-time.Hour)), Epoch: "E1", Enrolled: true, EnrolledAt: mbx.ISOTime(now.Add(-time.Hour)),
			EncAdAt: mbx.ISOTime(now.Add(-time.Hour)), EncAdExp: mbx.ISOTime(now.Add(29 * 24 * time.Hour)),
			SendersAt: mbx.ISOTime(now.Add(-time.Hour)), Senders: 1, SendersCurrent: true, Daemon: true},
	}
	env := Env{Home: home(t), HomeFlag: "../my home", Host: fh, Relay: fh, Daemon: true, Version: "v1", Now: func() time.Time { return now }, NoMarker: true}
	return &world{env: env, host: fh, relay: fr}
}

func (w *world) run(t *testing.T) Report {
	t.Helper()
	return Run(context.Background(), w.env)
}

func find(t *testing.T, r Report, id string) Check {
	t.Helper()
	for _, c := range r.Checks {
		if c.ID == id {
			return c
		}
	}
	t.Fatalf("no check %q in %+v", id, r.Checks)
	return Check{}
}

func TestAllWell(t *testing.T) {
	w := newWorld(t)
	r := w.run(t)
	if !r.OK {
		t.Fatalf("report not ok: %+v", r.Checks)
	}
	for _, c := range r.Checks {
		if c.Status != OK {
			t.Errorf("check %s = %s %q, want ok", c.ID, c.Status, c.Summary)
		}
	}
	for _, id := range []string{"host", "home.modes", "daemon", "daemon.version", "daemon.lan", "agents", "peer.work", "relay", "relay.reach",
		"relay.key", "relay.clock", "relay.enrol", "relay.account", "relay.enc-ad", "relay.senders", "outbox", "outbox.ended", "quarantine"} {
		find(t, r, id)
	}
}

// Each case breaks one thing of a healthy world and names the check that must say so.
func TestEachCheckFails(t *testing.T) {
	tests := []struct {
		name   string
		breakw func(t *testing.T, w *world)
		id     string
		status Status
		fix    string // a part of the fix
	}{
		{"no host", func(t *testing.T, w *world) { os.Remove(filepath.Join(w.env.Home, HostKeyFile)) }, "host", Fail, "agentmbx init --host home --home '../my home'"},
		{"host unreachable", func(t *testing.T, w *world) { w.env.Host, w.env.OpenErr = nil, errors.New("locked") }, "host", Fail, ""},
		{"key readable by others", func(t *testing.T, w *world) { os.Chmod(filepath.Join(w.env.Home, HostKeyFile), 0o644) }, "home.modes", Fail, "chmod 700"},
		{"home open to others", func(t *testing.T, w *world) { os.Chmod(w.env.Home, 0o755) }, "home.modes", Fail, "chmod 700"},
		{"no daemon", func(t *testing.T, w *world) { w.env.Daemon = false }, "daemon", Warn, "agentmbx daemon --home '../my home'"},
		{"LAN port taken", func(t *testing.T, w *world) {
			w.host.status.Listen, w.host.status.LANError = "127.0.0.1:7373", "listen tcp 127.0.0.1:7373: bind: address already in use"
		}, "daemon.lan", Warn, "--listen HOST:PORT"},
		{"daemon finds the relay down", func(t *testing.T, w *world) {
			w.host.status.Reach = []api.Reach{{Target: "lan:work", State: "up"},
				{Target: "relay", State: "down", Since: "2026-01-02T03:04:05Z", OutageSince: "2026-01-02T03:04:00Z"}}
		}, "daemon.reach", Warn, ""},
		{"agent created by incoming mail", func(t *testing.T, w *world) {
			w.host.agents = []api.Agent{{Name: "bob"}, {Name: "bobb", CreatedByMail: "ann@work"}}
		}, "agents", Warn, "agentmbx agents add bobb --home '../my home'"},
		{"daemon of another build", func(t *testing.T, w *world) { w.host.status.Version = "v0" }, "daemon.version", Warn, "agentmbx daemon stop --home '../my home' && agentmbx daemon --home '../my home'"},
		{"peer without enc key", func(t *testing.T, w *world) { w.host.peers[0].EncPub = "" }, "peer.work", Fail, "agentmbx peers remove work --home '../my home'"},
		{"relay-only peer, no relay", func(t *testing.T, w *world) { w.host.relay = api.RelayStatus{} }, "peer.work", Fail, "agentmbx relay set"},
		{"peer unreachable on the LAN", func(t *testing.T, w *world) { w.host.peers[0].Addr = "127.0.0.1:1" }, "peer.work", Warn, ""},
		{"peer's address answered by another key", func(t *testing.T, w *world) {
			w.host.status.LANAlerts = []api.LANAlert{{Host: "work", Fingerprint: w.host.peers[0].Fingerprint, Addr: "10.0.0.9:7373",
				Since: mbx.ISOTime(now), Last: mbx.ISOTime(now), Error: "10.0.0.9:7373 answered envelope accepted without a signed statement"}}
		}, "peer.work.lan", Fail, "agentmbx outbox --home '../my home'"},
		{"no relay", func(t *testing.T, w *world) { w.host.relay = api.RelayStatus{} }, "relay", Info, "agentmbx relay set URL --key"},
		{"trusted on first use", func(t *testing.T, w *world) { w.host.relay.TOFU = true }, "relay.pin", Warn, "--key"},
		{"plain http to a remote relay", func(t *testing.T, w *world) {
			w.host.relay.URL = "http://relay.example.com"
			w.env.RelayHTTPClient = &http.Client{Transport: noNetwork{}} // the probe must not leave the machine
		}, "relay.tls", Warn, "--tls-cert"},
		{"relay unreachable", func(t *testing.T, w *world) { w.host.relay.URL = "http://127.0.0.1:1" }, "relay.reach", Fail, "agentmbx relay info"},
		{"relay serves another key", func(t *testing.T, w *world) { w.relay.key = newKey(t) }, "relay.key", Fail, "--key " + ""},
		{"relay use stopped", func(t *testing.T, w *world) {
			w.host.relay.Stopped = true
			w.host.relay.KeyChange = &api.RelayKeyChange{Pinned: w.host.relay.Fingerprint, Served: "0000-0000-0000-0000", At: "x"}
		}, "relay.key", Fail, "agentmbx relay set"},
		{"clock 10 minutes behind", func(t *testing.T, w *world) { w.relay.skew = 10 * time.Minute }, "relay.clock", Fail, "NTP"},
		{"clock 2 minutes ahead", func(t *testing.T, w *world) { w.relay.skew = -2 * time.Minute }, "relay.clock", Warn, "NTP"},
		{"enrolment refused", func(t *testing.T, w *world) {
			w.host.relay.Enrolled = false
			w.host.relay.Problems = []api.RelayProblem{{Op: "enrol", Error: "relay refuses this host key (revoked or denied)", At: "x",
				Kind: api.RelayRefused}}
		}, "relay.enrol", Fail, "operator"},
		{"enrolment refused, with a token", func(t *testing.T, w *world) {
			w.host.relay.Enrolled = false
			w.host.relay.Token = &api.RelayToken{Source: "/etc/mbx/token", Account: "acme", Exp: "2026-05-01T12:00:00.000Z"}
			w.host.relay.Problems = []api.RelayProblem{{Op: "enrol", Error: "account token refused: token has invalid claims: token is expired", At: "x",
				Kind: api.RelayRefused}}
		}, "relay.enrol", Fail, "fresh account token into /etc/mbx/token"},
		{"enrolment failed: relay down", func(t *testing.T, w *world) {
			w.host.relay.Enrolled = false
			w.host.relay.Problems = []api.RelayProblem{{Op: "enrol", Error: "relayclient: enrol: relay unreachable: connection refused", At: "x",
				Kind: api.RelayTransient}}
		}, "relay.enrol", Warn, "relay up and reachable"},
		{"account token unusable", func(t *testing.T, w *world) {
			w.host.relay.Token = &api.RelayToken{Source: "$MBX_RELAY_TOKEN", Error: "not a JWT"}
		}, "relay.account", Fail, "valid account token into $MBX_RELAY_TOKEN"},
		{"account token expired", func(t *testing.T, w *world) {
			w.host.relay.Account = "acme"
			w.host.relay.Token = &api.RelayToken{Source: "/etc/mbx/token", Account: "acme", Exp: "2026-05-01T12:00:00.000Z", Expired: true}
		}, "relay.account", Warn, "needs a fresh token: put one into /etc/mbx/token"},
		{"not enrolled, no daemon", func(t *testing.T, w *world) { w.host.relay.Enrolled, w.env.Daemon = false, false }, "relay.enrol", Warn, "agentmbx daemon"},
		{"new relay epoch", func(t *testing.T, w *world) { w.relay.epoch = "E2" }, "relay.enrol", Warn, ""},
		{"enc-key ad not published", func(t *testing.T, w *world) { w.host.relay.EncAdAt = "" }, "relay.enc-ad", Warn, ""},
		{"enc-key ad expired", func(t *testing.T, w *world) { w.host.relay.EncAdExp = mbx.ISOTime(now.Add(-time.Minute)) }, "relay.enc-ad", Fail, ""},
		{"enc-key ad expires soon", func(t *testing.T, w *world) { w.host.relay.EncAdExp = mbx.ISOTime(now.Add(time.Hour)) }, "relay.enc-ad", Warn, ""},
		{"allowlist not published", func(t *testing.T, w *world) { w.host.relay.SendersAt = "" }, "relay.senders", Warn, ""},
		{"allowlist stale", func(t *testing.T, w *world) { w.host.relay.SendersCurrent = false }, "relay.senders", Warn, ""},
		{"a push failed", func(t *testing.T, w *world) {
			w.host.relay.Problems = []api.RelayProblem{{Op: "push", Error: "relay unreachable", At: "x"}}
		}, "relay.push", Warn, ""},
		{"old pending row", func(t *testing.T, w *world) {
			id := mbx.NewULIDs(rand.Reader).New(now.Add(-3 * time.Hour))
			w.host.rows = []api.OutboxRow{{MsgID: id, Host: "work", Kind: "envelope", State: "pending", Attempts: 4, LastError: "dial tcp: refused"}}
		}, "outbox", Warn, "agentmbx sent "},
		{"rows ended undelivered", func(t *testing.T, w *world) {
			w.host.rows = []api.OutboxRow{{MsgID: "01KBN0000000000000000000AA", Host: "work", Kind: "envelope", State: "expired",
				Reason: "not delivered within 72h", EndedAt: mbx.ISOTime(now.Add(-time.Minute))}}
		}, "outbox.ended", Warn, "agentmbx sent 01KBN0000000000000000000AA --home '../my home'"},
		{"quarantine", func(t *testing.T, w *world) { w.host.relay.Quarantined = 2 }, "quarantine", Warn, "agentmbx relay quarantine --home '../my home'"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t)
			tt.breakw(t, w)
			r := w.run(t)
			c := find(t, r, tt.id)
			if c.Status != tt.status || !strings.Contains(c.Fix+"\n"+c.Detail, tt.fix) {
				t.Fatalf("check %s = %s %q fix %q detail %q; want %s with a fix or detail containing %q", tt.id, c.Status, c.Summary, c.Fix, c.Detail, tt.status, tt.fix)
			}
			for _, c := range r.Checks {
				checkPasteable(t, c)
			}
			if wantOK := !slices.ContainsFunc(r.Checks, func(c Check) bool { return c.Status == Fail }); r.OK != wantOK {
				t.Fatalf("report OK = %v with checks %+v", r.OK, r.Checks)
			}
			if tt.status == Fail && r.OK {
				t.Fatal("a failed check left the report ok")
			}
		})
	}
}

func TestKeyMismatchFixNamesTheServedKey(t *testing.T) {
	w := newWorld(t)
	other := newKey(t)
	w.relay.key = other
	c := find(t, w.run(t), "relay.key")
	want := "agentmbx relay set " + w.host.relay.URL + " --key " + other.Fingerprint() + " --home '../my home'"
	if c.Fix != want {
		t.Fatalf("fix = %q, want %q", c.Fix, want)
	}
}

func TestNewEpochShowsReEnrolment(t *testing.T) {
	w := newWorld(t)
	w.relay.epoch = "E2"
	c := find(t, w.run(t), "relay.enrol")
	if !strings.Contains(c.Summary, "E2") || !strings.Contains(c.Summary, "re-enrolment") || !strings.Contains(c.Detail, "E1") {
		t.Fatalf("relay.enrol = %+v", c)
	}
}

// A peer's LAN server that signs its enc-key ad with the pinned key passes; one that signs with
// another key is an impostor (fail); one that advertises another enc key is a warning.
func TestPeerProbe(t *testing.T) {
	peerKey, peerEnc := newKey(t), newEnc(t)
	serve := func(k mbx.SigningKey, enc mbx.EncKey) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ad, sig, err := mbx.SignEncAdV2("work", k, enc.PublicKey(), now, 0)
			if err != nil {
				t.Error(err)
			}
			pub, _ := ad.Publish(sig)
			json.NewEncoder(w).Encode(pub)
		}))
		t.Cleanup(srv.Close)
		return strings.TrimPrefix(srv.URL, "http://")
	}
	tests := []struct {
		name   string
		addr   string
		status Status
	}{
		{"the pinned peer", serve(peerKey, peerEnc), OK},
		{"another host", serve(newKey(t), peerEnc), Fail},
		{"a new enc key", serve(peerKey, newEnc(t)), Warn},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t)
			w.host.peers = []api.Peer{{Host: "work", HostPubkey: peerKey.PublicKey(), Fingerprint: peerKey.Fingerprint(),
				EncPub: peerEnc.PublicKey(), Addr: tt.addr}}
			if c := find(t, w.run(t), "peer.work"); c.Status != tt.status {
				t.Fatalf("peer.work = %+v, want %s", c, tt.status)
			}
		})
	}
}

// Rows that ended undelivered are reported once: the next run, after the marker, is quiet.
func TestEndedSinceTheLastDoctor(t *testing.T) {
	w := newWorld(t)
	w.env.NoMarker = false
	w.host.rows = []api.OutboxRow{{MsgID: "01KBN0000000000000000000AA", Host: "work", State: "rejected",
		Reason: "rejected:sender not accepted by target", EndedAt: mbx.ISOTime(now.Add(-time.Minute))}}
	if c := find(t, w.run(t), "outbox.ended"); c.Status != Warn {
		t.Fatalf("first run: %+v", c)
	}
	if _, err := os.Stat(filepath.Join(w.env.Home, MarkerFile)); err != nil {
		t.Fatalf("marker not written: %v", err)
	}
	later := now.Add(time.Hour)
	w.env.Now = func() time.Time { return later }
	if c := find(t, w.run(t), "outbox.ended"); c.Status != OK || !strings.Contains(c.Summary, "since the last doctor") {
		t.Fatalf("second run: %+v", c)
	}
}

func TestJSONShape(t *testing.T) {
	w := newWorld(t)
	w.host.relay.Quarantined = 1
	var buf bytes.Buffer
	if err := w.run(t).WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(buf.Bytes(), &top); err != nil {
		t.Fatal(err)
	}
	if len(top) != 2 || top["ok"] == nil || top["checks"] == nil {
		t.Fatalf("top-level keys: %s", buf.String())
	}
	var checks []map[string]any
	if err := json.Unmarshal(top["checks"], &checks); err != nil || len(checks) == 0 {
		t.Fatalf("checks: %v", err)
	}
	for _, c := range checks {
		if len(c) != 5 {
			t.Errorf("check has keys %v, want exactly id, status, summary, detail, fix", c)
		}
		for _, k := range []string{"id", "status", "summary", "detail", "fix"} {
			if _, ok := c[k].(string); !ok {
				t.Errorf("check %v: %s is not a string", c, k)
			}
		}
		if s := c["status"]; s != "ok" && s != "warn" && s != "fail" && s != "info" {
			t.Errorf("status %v", s)
		}
	}
}

func TestPlainAndStyled(t *testing.T) {
	w := newWorld(t)
	w.host.relay.Quarantined = 1
	r := w.run(t)
	var plain bytes.Buffer
	if err := r.WritePlain(&plain); err != nil {
		t.Fatal(err)
	}
	out := plain.String()
	if strings.ContainsRune(out, '\x1b') || strings.ContainsAny(out, "✔✗") {
		t.Fatalf("plain output has escapes or marks:\n%s", out)
	}
	for _, want := range []string{"ok    host ", "warn  quarantine ", "fix: agentmbx relay quarantine", "doctor: "} {
		if !strings.Contains(out, want) {
			t.Errorf("plain output lacks %q:\n%s", want, out)
		}
	}
	var styled bytes.Buffer
	if err := r.WriteStyled(&styled); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"✔", "!", "fix:"} {
		if !strings.Contains(styled.String(), want) {
			t.Errorf("styled output lacks %q:\n%s", want, styled.String())
		}
	}
}

// Text from a peer or a relay cannot drive the terminal.
func TestOutputIsOneLinePerField(t *testing.T) {
	r := Report{Checks: []Check{{ID: "x", Status: Warn, Summary: "bad\x1b[2Jthing\nsecond", Detail: "a\x07", Fix: "f\rix"}}}
	var buf bytes.Buffer
	r.WritePlain(&buf)
	if strings.ContainsAny(buf.String(), "\x1b\x07\r") || strings.Count(buf.String(), "\n") != 4 {
		t.Fatalf("output:\n%q", buf.String())
	}
}

func TestRelayAccountAndToken(t *testing.T) {
	w := newWorld(t)
	if c := find(t, w.run(t), "relay.account"); c.Status != OK || !strings.Contains(c.Summary, "no account proven") {
		t.Fatalf("no token: %+v", c)
	}
	w.host.relay.Account = "acme"
	w.host.relay.Token = &api.RelayToken{Source: "/etc/mbx/token", Account: "acme", Exp: "2026-05-01T12:00:00.000Z"}
	c := find(t, w.run(t), "relay.account")
	if c.Status != OK || c.Summary != "account acme; account token from /etc/mbx/token, account acme, expires 2026-05-01T12:00:00.000Z" {
		t.Fatalf("with a token: %+v", c)
	}
}

// TestRelayV1 (relay set --allow-v1): doctor warns that the relay is unauthenticated; while it
// answers v1 only it says so, and once it answers v2 it says that too, with the key to pin.
func TestRelayV1(t *testing.T) {
	w := newWorld(t)
	v1only := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(v1only.Close)
	w.host.relay = api.RelayStatus{Configured: true, URL: v1only.URL, V1: true, PinnedAt: mbx.ISOTime(now.Add(-time.Hour)),
		Enrolled: true, EnrolledAt: mbx.ISOTime(now.Add(-time.Hour)), EncAdAt: mbx.ISOTime(now.Add(-time.Hour)), Daemon: true}
	r := w.run(t)
	if c := find(t, r, "relay.v1"); c.Status != Warn || !strings.Contains(c.Summary, "unauthenticated") {
		t.Errorf("relay.v1 = %+v, want a warning that the relay is unauthenticated", c)
	}
	if c := find(t, r, "relay.reach"); c.Status != OK || !strings.Contains(c.Summary, "v1 only") {
		t.Errorf("relay.reach = %+v", c)
	}
	for _, c := range r.Checks {
		if c.ID == "relay.v2" || c.ID == "relay.key" || c.ID == "relay.pin" {
			t.Errorf("a v1 relay got %+v", c)
		}
		if c.Status == Fail {
			t.Errorf("failing check for a working v1 relay: %+v", c)
		}
	}
	// The relay now answers v2: doctor shows the key to pin.
	v2 := httptest.NewServer(w.relay)
	t.Cleanup(v2.Close)
	w.host.relay.URL = v2.URL
	c := find(t, w.run(t), "relay.v2")
	want := "agentmbx relay set " + v2.URL + " --key " + w.relay.key.Fingerprint() + " --home '../my home'"
	if c.Status != Warn || !strings.Contains(c.Summary, w.relay.key.Fingerprint()) || c.Fix != want {
		t.Fatalf("relay.v2 = %+v, want the key to pin and fix %q", c, want)
	}
}

// placeholder matches words a person would have to replace in a command (NAME, CARD, URL, ...).
var placeholder = regexp.MustCompile(`\b(NAME|CARD|URL|FINGERPRINT|HOST|PORT|FILE|CA)\b|…`)

// checkPasteable fails the test when c's fix is not a command that works as pasted: it holds a
// placeholder, or it is a host command without the --home the doctor was given.
func checkPasteable(t *testing.T, c Check) {
	t.Helper()
	if c.Fix == "" {
		return
	}
	if placeholder.MatchString(c.Fix) {
		t.Errorf("check %s: fix %q holds a placeholder: it cannot work when pasted", c.ID, c.Fix)
	}
	for _, part := range strings.Split(c.Fix, " && ") {
		if strings.HasPrefix(part, "agentmbx ") && !strings.HasPrefix(part, "agentmbx relay info ") &&
			!strings.HasSuffix(part, " --home '../my home'") {
			t.Errorf("check %s: fix %q does not carry the --home the doctor was given", c.ID, c.Fix)
		}
	}
}
