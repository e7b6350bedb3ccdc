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
