package main

import (
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// Every command a user can run shows an Example, and no help text writes --to * unquoted.
func TestEveryCommandHasAnExample(t *testing.T) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Runnable() && !c.Hidden && c.Annotations[annGroup] == "" && c.Name() != "help" && !strings.HasPrefix(c.CommandPath(), "agentmbx completion") &&
			strings.TrimSpace(c.Example) == "" {
			t.Errorf("%s has no Example (add one to the command or to examples in help.go)", c.CommandPath())
		}
		for _, text := range []string{c.Long, c.Example, c.Use} {
			if !quoteStar(text) {
				t.Errorf("%s: help shows --to * unquoted: %q", c.CommandPath(), text)
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRootCmd())
}

func TestRootHelpSaysWhereToStart(t *testing.T) {
	var out strings.Builder
	cmd := newRootCmd()
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"--help"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Start here:", "agentmbx demo", "agentmbx init --host NAME", "agentmbx pair", "agentmbx relay set URL --key", "agentmbx doctor"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("root help lacks %q:\n%s", want, out.String())
		}
	}
}

func TestSendExampleQuotesTheStar(t *testing.T) {
	var out strings.Builder
	cmd := newRootCmd()
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"send", "--help"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "--to '*'") {
		t.Fatalf("send --help does not show --to '*':\n%s", out.String())
	}
}
