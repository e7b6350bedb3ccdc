package main

import (
	"regexp"
	"strings"
	"testing"

	"github.com/agentmbx/agentmbx/api"
)

// TestE2EIDRotate: `id rotate` with the daemon stopped replaces alpha's keys, beta's daemon takes
// the record over the LAN, and mail flows both ways afterwards under the new key. The daemon
// running, a missing --yes and a second rotation before the first is done are refused.
func TestE2EIDRotate(t *testing.T) {
	_, a, b := twoNodes(t)
	a.must("agents", "add", "alice")
	b.must("agents", "add", "bob")
	a.start()
	b.start()
	pinCards(t, a, b)
	var before api.Status
	a.mustJSON(&before, "id")

	if r := a.run("id", "rotate", "--yes"); r.code == 0 || !strings.Contains(r.stderr, "daemon is running") {
		t.Fatalf("rotate with the daemon running: exit %d, stderr %q", r.code, r.stderr)
	}
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
