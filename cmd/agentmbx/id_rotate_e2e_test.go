package main

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/agentmbx/agentmbx/api"
)

// TestE2EIDRotate: `id rotate` with the daemon stopped replaces alpha's keys, beta's daemon takes
// the record over the LAN, and mail flows both ways afterwards under the new key. A missing --yes
// is refused.
func TestE2EIDRotate(t *testing.T) {
	_, a, b := twoNodes(t)
	a.must("agents", "add", "alice")
	b.must("agents", "add", "bob")
	a.start()
	b.start()
	pinCards(t, a, b)
	var before api.Status
	a.mustJSON(&before, "id")

	a.stop()
	if r := a.run("id", "rotate"); r.code == 0 || !strings.Contains(r.stderr, "--yes") {
		t.Fatalf("rotate without --yes and no terminal: exit %d, stderr %q", r.code, r.stderr)
	}
	out := a.must("id", "rotate", "--yes")
	if !regexp.MustCompile(`(?m)^  peer beta: LAN applied`).MatchString(out) || !strings.Contains(out, ", done ") {
		t.Fatalf("id rotate printed:\n%s", out)
	}
	var after api.Status
	a.mustJSON(&after, "id")
	if after.Fingerprint == before.Fingerprint || after.Rotation == nil || after.Rotation.OldFingerprint != before.Fingerprint || after.Rotation.Done == "" {
		t.Fatalf("id after the rotation = %+v (rotation %+v)", after, after.Rotation)
	}
	var peers []api.Peer
	b.mustJSON(&peers, "peers")
	if len(peers) != 1 || peers[0].Fingerprint != after.Fingerprint || len(peers[0].RetiredFingerprints) != 1 ||
		peers[0].RetiredFingerprints[0] != before.Fingerprint {
		t.Fatalf("beta's peers after the rotation = %+v", peers)
	}
	if out := b.must("peers"); !strings.Contains(out, "alpha rotated its host key") {
		t.Errorf("peers does not show the rotation:\n%s", out)
	}

	a.start()
	id := a.send("alice", "bob@beta", "after", "signed with the new key")
	b.waitMail("bob", id)
	a.waitSent(id, "delivered", "bob@beta")
	id2 := b.send("bob", "alice@alpha", "re: after", "sealed to the new enc key")
	a.waitMail("alice", id2)
	b.waitSent(id2, "delivered", "alice@alpha")
	a.stop()
	if r := a.run("id", "rotate", "--yes"); r.code != 0 {
		t.Errorf("a second rotation once the first is done: exit %d, stderr %q", r.code, r.stderr)
	}
}

// TestE2EIDRotateWhileRunning: `id rotate` through alpha's running daemon while both hosts send
// to each other (messages before, during and after it). When the command returns, `id --json`
// shows the new key; every message arrives exactly once each way; beta pins the new key with
// the old one retired; a second rotation is refused while the first is not done, and taken once
// it is.
func TestE2EIDRotateWhileRunning(t *testing.T) {
	_, a, b := twoNodes(t)
	a.must("agents", "add", "alice")
	b.must("agents", "add", "bob")
	a.start()
	b.start()
	pinCards(t, a, b)
	var before api.Status
	a.mustJSON(&before, "id")

	var toBob, toAlice []string
	sendBoth := func(phase string, n int) {
		for i := range n {
			toBob = append(toBob, a.send("alice", "bob@beta", fmt.Sprintf("%s %d", phase, i), "from alpha"))
			toAlice = append(toAlice, b.send("bob", "alice@alpha", fmt.Sprintf("%s %d", phase, i), "from beta"))
		}
	}
	sendBoth("before", 5)
	rot := a.background("id", "rotate", "--yes", "--json")
	sendBoth("during", 5)
	if err := rot.wait(t); err != nil {
		t.Fatalf("id rotate with the daemon running: %v\n%s", err, rot.errb.String())
	}
	var r api.Rotation
	if err := json.Unmarshal([]byte(rot.out.String()), &r); err != nil || r.OldFingerprint != before.Fingerprint || r.NewFingerprint == before.Fingerprint {
		t.Fatalf("id rotate --json printed %q (%v)", rot.out.String(), err)
	}
	var after api.Status
	a.mustJSON(&after, "id")
	if after.Fingerprint != r.NewFingerprint || after.Rotation == nil || after.Rotation.NewFingerprint != r.NewFingerprint {
		t.Fatalf("id right after the rotation = %+v, want the new key %s", after, r.NewFingerprint)
	}
	sendBoth("after", 5)
	for _, w := range []struct {
		n     *node
		agent string
		ids   []string
	}{{b, "bob", toBob}, {a, "alice", toAlice}} {
		for _, id := range w.ids {
			w.n.waitMail(w.agent, id) // fails on a second copy
		}
		if got := len(w.n.inbox(w.agent)); got != len(w.ids) {
			t.Fatalf("%s holds %d messages, want %d", w.agent, got, len(w.ids))
		}
	}
	a.waitFor("the rotation done", func() (bool, string) {
		var st api.Status
		a.mustJSON(&st, "id")
		return st.Rotation != nil && st.Rotation.Done != "", fmt.Sprintf("%+v", st.Rotation)
	})
	var peers []api.Peer
	b.mustJSON(&peers, "peers")
	if len(peers) != 1 || peers[0].Fingerprint != r.NewFingerprint || !slices.Contains(peers[0].RetiredFingerprints, before.Fingerprint) {
		t.Fatalf("beta's peers after the rotation = %+v", peers)
	}
	for _, n := range []*node{a, b} {
		n.waitFor("every row settled", func() (bool, string) {
			ok, _, env := outboxSettled(n)
			return ok, fmt.Sprintf("%+v", env)
		})
	}
	if r := a.run("id", "rotate", "--yes"); r.code != 0 {
		t.Errorf("a second rotation through the daemon once the first is done: exit %d, stderr %q", r.code, r.stderr)
	}
}
