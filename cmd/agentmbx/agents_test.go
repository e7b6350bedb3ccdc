package main

import (
	"strings"
	"testing"

	"github.com/agentmbx/agentmbx/api"
)

// The agents table gets a NOTE column only when incoming mail created an agent, naming the sender.
func TestPrintAgentsMarksCreatedByMail(t *testing.T) {
	var plain strings.Builder
	if err := printAgents(&plain, []api.Agent{{Name: "bob", Role: "reviewer"}}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(plain.String(), "NOTE") {
		t.Errorf("NOTE column without a created agent:\n%s", plain.String())
	}
	var b strings.Builder
	if err := printAgents(&b, []api.Agent{{Name: "bob"}, {Name: "bobb", CreatedByMail: "ann@alpha"}}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if !strings.Contains(out, "NOTE") || !strings.Contains(out, "created by incoming mail from ann@alpha") {
		t.Errorf("agents table:\n%s", out)
	}
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "bob ") && strings.Contains(l, "created") {
			t.Errorf("bob marked: %q", l)
		}
	}
}

// The outbox table keeps LAST_ERROR whole (other cells are cut at 60 characters).
func TestOutboxTableKeepsLastErrorWhole(t *testing.T) {
	long := "dial tcp 127.0.0.1:7383: connect: connection refused; then the relay: relay stopped (key changed) at 10:00"
	var b strings.Builder
	if err := outboxTable(&b, []api.OutboxRow{{MsgID: "01M", Host: "beta", State: "pending", LastError: long + "\nsecond line"}}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), long+`\x0asecond line`) { // a newline escaped, on the line
		t.Fatalf("outbox table cut the error:\n%s", b.String())
	}
}

// Help of the mail commands explains every mailbox state; relay status explains the seq.
func TestPlainWords(t *testing.T) {
	for _, s := range []string{"delivered", "notified", "read", "acked"} {
		if !strings.Contains(inboxStates, "\n  "+s+" ") {
			t.Errorf("inbox states help lacks %s", s)
		}
	}
	root := newRootCmd()
	for _, name := range []string{"inbox", "read", "ack"} {
		c, _, err := root.Find([]string{name})
		if err != nil || !strings.Contains(c.Long, "notified   listed to the agent once") {
			t.Errorf("%s help lacks the states: %v\n%s", name, err, c.Long)
		}
	}
	got := receivePosition(1796280634752)
	if !strings.Contains(got, "through seq 1796280634752") || !strings.Contains(got, "Unix ms") || !strings.Contains(got, "2026-12-03T") {
		t.Errorf("receive position = %q", got)
	}
	if got := receivePosition(0); !strings.Contains(got, "nothing pulled yet") {
		t.Errorf("receive position 0 = %q", got)
	}
}
