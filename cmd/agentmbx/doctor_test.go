package main

// doctor against real processes: a relay and two host daemons with no LAN route. It follows the
// checks through an enrolment, a relay epoch change (G13: enrolled under the current key and
// epoch is ok; a new epoch shows the re-enrolment), and a relay restarted with another key at the
// same URL (a failing check whose fix pins the served key, exit 1; relay status exits 1 too).

import (
	"encoding/json"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentmbx/agentmbx/doctor"
)

// doctorRun runs `agentmbx doctor --json` on n and returns the report and the exit code.
func (n *node) doctorRun() (doctor.Report, int) {
	n.t.Helper()
	r := n.run("doctor", "--json")
	var rep doctor.Report
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		n.t.Fatalf("%s: doctor --json: exit %d, %v\nstdout: %s\nstderr: %s", n.name, r.code, err, r.stdout, r.stderr)
	}
	return rep, r.code
}

// relayInfoOf runs `agentmbx relay info URL --json`.
func relayInfoOf(t *testing.T, url string, extra ...string) relayInfo {
	t.Helper()
	cmd := exec.Command(agentmbxPath(t), append([]string{"relay", "info", url, "--json"}, extra...)...)
	cmd.Env = childEnv()
	out, err := cmd.Output()
	var ri relayInfo
	if err == nil {
		err = json.Unmarshal(out, &ri)
	}
	if err != nil || ri.Fingerprint == "" {
		t.Fatalf("relay info %s: %v\n%s", url, err, out)
	}
	return ri
}

// check finds one check of a report.
func check(t *testing.T, rep doctor.Report, id string) doctor.Check {
	t.Helper()
	for _, c := range rep.Checks {
		if c.ID == id {
			return c
		}
	}
	t.Fatalf("no check %s in %+v", id, rep.Checks)
	return doctor.Check{}
}

func wantCheck(t *testing.T, rep doctor.Report, id string, st doctor.Status, summary string) doctor.Check {
	t.Helper()
	c := check(t, rep, id)
	if c.Status != st || !strings.Contains(c.Summary, summary) {
		t.Fatalf("check %s = %s %q (fix %q), want %s with %q", id, c.Status, c.Summary, c.Fix, st, summary)
	}
	return c
}

func TestE2EDoctor(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test")
	}
	dir := e2eDir(t)
	relayDir := filepath.Join(dir, "relay")
	relay := startRelayProc(t, relayDir, freePort(t))
	url := "http://" + relay.addr
	a, b := newNode(t, dir, "alpha"), newNode(t, dir, "beta")
	pinWithoutLAN(t, a, b)
	info := relayInfoOf(t, url)
	for _, n := range []*node{a, b} {
		n.must("relay", "set", url, "--key", strings.ToUpper("ed25519:"+info.Fingerprint))
	}

	// No daemon: doctor reads the store; warnings, no failure.
	rep, code := a.doctorRun()
	if code != 0 || !rep.OK {
		t.Fatalf("doctor without a daemon: exit %d, %+v", code, rep)
	}
	wantCheck(t, rep, "daemon", doctor.Warn, "not running")
	if c := wantCheck(t, rep, "relay.enrol", doctor.Warn, "not enrolled"); !strings.Contains(c.Fix, "agentmbx daemon") {
		t.Fatalf("relay.enrol fix = %q", c.Fix)
	}
	wantCheck(t, rep, "relay", doctor.OK, "pinned with --key")
	wantCheck(t, rep, "peer.beta", doctor.OK, "relay-only")

	// Daemons enrol: everything is ok, through the control socket.
	a.start()
	b.start()
	for _, n := range []*node{a, b} {
		n.waitFor("enrolment", func() (bool, string) {
			st := n.relayStatus()
			return st.Enrolled && st.SendersCurrent && st.EncAdExp != "", st.Epoch
		})
	}
	rep, code = a.doctorRun()
	if code != 0 || !rep.OK {
		t.Fatalf("doctor with daemons: exit %d, %+v", code, rep)
	}
	for _, c := range rep.Checks {
		if c.Status != doctor.OK {
			t.Errorf("check %s = %s %q", c.ID, c.Status, c.Summary)
		}
	}
	wantCheck(t, rep, "daemon.version", doctor.OK, "same build")
	// One version string everywhere: this binary, the LAN status, the relay's info.
	var v struct{ String string }
	vcmd := exec.Command(agentmbxPath(t), "version", "--json")
	vcmd.Env = childEnv()
	vout, err := vcmd.Output()
	if err != nil || json.Unmarshal(vout, &v) != nil {
		t.Fatalf("version --json: %v %s", err, vout)
	}
	resp, err := http.Get("http://" + a.addr + "/v2/status")
	if err != nil {
		t.Fatal(err)
	}
	var lan struct{ Version string }
	err = json.NewDecoder(resp.Body).Decode(&lan)
	resp.Body.Close()
	if err != nil || v.String == "" || lan.Version != v.String || info.Version != v.String {
		t.Fatalf("versions: binary %q, LAN status %q, relay info %q (%v)", v.String, lan.Version, info.Version, err)
	}
	epoch1 := a.relayStatus().Epoch
	wantCheck(t, rep, "relay.enrol", doctor.OK, "epoch "+epoch1)

	// G13: the relay gets a new epoch while alpha's daemon is down: doctor shows the
	// re-enrolment due; once the daemon runs it is enrolled under the new epoch.
	a.stop()
	relay.stop()
	if out, err := exec.Command(agentmbxPath(t), "relay", "rotate-epoch", "--store-dir", relayDir).CombinedOutput(); err != nil {
		t.Fatalf("rotate-epoch: %v\n%s", err, out)
	}
	relay = startRelayProc(t, relayDir, relay.addr)
	rep, _ = a.doctorRun()
	c := wantCheck(t, rep, "relay.enrol", doctor.Warn, "re-enrolment")
	if !strings.Contains(c.Detail, epoch1) {
		t.Fatalf("relay.enrol detail = %q, want the old epoch %s", c.Detail, epoch1)
	}
	a.start()
	a.waitFor("enrolment under the new epoch", func() (bool, string) {
		st := a.relayStatus()
		return st.Enrolled && st.Epoch != epoch1, st.Epoch
	})
	rep, _ = a.doctorRun()
	wantCheck(t, rep, "relay.enrol", doctor.OK, "enrolled under key "+info.Fingerprint+", epoch "+a.relayStatus().Epoch)

	// Another relay (another key) at the same URL: a failing check whose fix pins the served
	// key, exit 1; relay use stops at beta's next push, and relay status exits 1 with a fix line.
	relay.stop()
	other := startRelayProc(t, filepath.Join(dir, "other"), relay.addr)
	otherInfo := relayInfoOf(t, url)
	rep, code = b.doctorRun()
	if code != 1 || rep.OK {
		t.Fatalf("doctor against another relay key: exit %d, ok %v", code, rep.OK)
	}
	c = wantCheck(t, rep, "relay.key", doctor.Fail, "serves key "+otherInfo.Fingerprint)
	if want := "agentmbx relay set " + url + " --key " + otherInfo.Fingerprint + " --home " + b.home; c.Fix != want {
		t.Fatalf("relay.key fix = %q, want %q", c.Fix, want)
	}
	b.must("agents", "add", "bob")
	b.send("bob", "alpha", "to a relay with another key", "held")
	b.waitFor("relay use to stop", func() (bool, string) { st := b.relayStatus(); return st.Stopped, "" })
	r := b.run("relay", "status")
	if r.code != 1 || !strings.Contains(r.stdout, "fix:") || !strings.Contains(r.stdout, "--key "+otherInfo.Fingerprint) {
		t.Fatalf("relay status while stopped: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	// Plain output when not a terminal: no escapes, no marks, and the fix on its own line.
	r = b.run("doctor")
	if r.code != 1 || strings.ContainsAny(r.stdout, "\x1b✔✗") || !strings.Contains(r.stdout, "fail  relay.key") ||
		!strings.Contains(r.stdout, "fix: agentmbx relay set "+url+" --key "+otherInfo.Fingerprint) {
		t.Fatalf("doctor, plain: exit %d\n%s", r.code, r.stdout)
	}
	_ = other
}
