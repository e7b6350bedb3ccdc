package main

// The spec's T168 list with real processes: a relay process and host daemons with no LAN route
// between them. After a relay SIGKILL and restart the enrolments hold (none is redone); a name
// squatter (another host key enrolled under the same name) never receives
// the host's mail; after a restore (new epoch) every host enrols again and mail flows with
// nothing lost or doubled; a relay that comes back with another key stops relay use until the
// owner confirms it with `relay set --key`.

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentmbx/agentmbx/relayserver"
)

// copies counts the messages with id in agent's inbox.
func (n *node) copies(agent, id string) int {
	k := 0
	for _, m := range n.inbox(agent) {
		if m.ID == id {
			k++
		}
	}
	return k
}

func TestE2ERelayEnrolmentRecovery(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test")
	}
	t.Setenv(relayserver.EnvRelayDir, "")
	dir := e2eDir(t)
	store := filepath.Join(dir, "relay")
	relay := startRelayProc(t, store, freePort(t))
	url := "http://" + relay.addr
	a, b := newNode(t, dir, "alpha"), newNode(t, dir, "beta")
	if err := os.Mkdir(filepath.Join(dir, "other"), 0o700); err != nil {
		t.Fatal(err)
	}
	squat := newNode(t, filepath.Join(dir, "other"), "beta") // the same name, another key
	a.must("agents", "add", "alice")
	b.must("agents", "add", "bob")
	squat.must("agents", "add", "bob")
	pinWithoutLAN(t, a, b)
	all := []*node{a, b, squat}
	for _, n := range all {
		n.must("relay", "set", url)
		n.start()
	}
	waitEnrolled := func(epoch string) {
		t.Helper()
		for _, n := range all {
			n.waitFor("enrolment at the relay", func() (bool, string) {
				st := n.relayStatus()
				return st.Enrolled && st.EncAdExp != "" && (epoch == "" || st.Epoch == epoch), fmt.Sprintf("%+v", st)
			})
		}
	}
	waitEnrolled("")

	// Mail is routed by key: the squatter of beta's name gets none of it.
	id1 := a.send("alice", "bob@beta", "one", "before the backup")
	b.waitMail("bob", id1)
	a.waitSent(id1, "delivered", "bob@beta")
	// The relay is killed (SIGKILL) and restarts on its store: the enrolments survived, so no host
	// enrols again (the enrolment cache keeps its time) and mail flows.
	enrolledAt := map[*node]string{}
	for _, n := range all {
		enrolledAt[n] = n.relayStatus().EnrolledAt
	}
	relay.p.Cmd.Process.Kill()
	<-relay.p.Done()
	relay = startRelayProc(t, store, relay.addr)
	id0 := a.send("alice", "bob@beta", "zero", "after a relay SIGKILL")
	b.waitMail("bob", id0)
	a.waitSent(id0, "delivered", "bob@beta")
	for _, n := range all {
		if st := n.relayStatus(); !st.Enrolled || st.EnrolledAt != enrolledAt[n] {
			t.Fatalf("%s after the relay restart: %+v, want the enrolment of %s kept", n.name, st, enrolledAt[n])
		}
	}
	backup := filepath.Join(dir, "relay.backup")
	if _, _, err := runRelay(t, "backup", backup, "--store-dir", store); err != nil {
		t.Fatalf("relay backup: %v", err)
	}
	id2 := a.send("alice", "bob@beta", "two", "after the backup: the restored relay never had it")
	b.waitMail("bob", id2)
	a.waitSent(id2, "delivered", "bob@beta")

	// Restore: the relay comes back under a new epoch with the backup's enrolments.
	relay.stop()
	if _, _, err := runRelay(t, "restore", backup, "--store-dir", store); err != nil {
		t.Fatalf("relay restore: %v", err)
	}
	epoch := storeEpoch(t, store)
	relay = startRelayProc(t, store, relay.addr)
	id3 := a.send("alice", "bob@beta", "three", "after the restore")
	waitEnrolled(epoch)
	b.waitMail("bob", id3)
	a.waitSent(id3, "delivered", "bob@beta")
	rep := b.send("bob", "alice@alpha", "re: three", "back through the restored relay")
	a.waitMail("alice", rep)
	for _, id := range []string{id0, id1, id2, id3} {
		if n := b.copies("bob", id); n != 1 {
			t.Fatalf("bob holds %d copies of %s", n, id)
		}
	}
	if got := squat.inbox("bob"); len(got) != 0 {
		t.Fatalf("the name squatter received %+v", got)
	}

	// The relay comes back with another key (a new store beside the old one): relay use stops.
	relay.stop()
	startRelayProc(t, filepath.Join(dir, "relay2"), relay.addr) // its cleanup stops it
	id4 := a.send("alice", "bob@beta", "four", "held while the relay key is unconfirmed")
	served := ""
	a.waitFor("relay use stopped", func() (bool, string) {
		st := a.relayStatus()
		if st.Stopped && st.KeyChange != nil {
			served = st.KeyChange.Served
		}
		return served != "", fmt.Sprintf("%+v", st)
	})
	if r := a.run("relay", "status"); r.code != 1 || !strings.Contains(r.stdout+r.stderr, served) {
		t.Fatalf("relay status while stopped: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	for _, row := range a.outboxRows(id4) {
		if row.State != "pending" || row.Relay != "" {
			t.Fatalf("row while relay use is stopped = %+v", row)
		}
	}
	// The owners confirm the new key; mail flows again.
	for _, n := range []*node{a, b} {
		n.must("relay", "set", url, "--key", served)
	}
	b.waitMail("bob", id4)
	a.waitSent(id4, "delivered", "bob@beta")
	if n := b.copies("bob", id4); n != 1 {
		t.Fatalf("bob holds %d copies of %s", n, id4)
	}
}
