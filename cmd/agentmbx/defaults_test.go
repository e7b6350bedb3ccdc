package main

import (
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentmbx/agentmbx/relayserver"
)

// helpDefault is the default `--help` of the command args prints for flag ("(default X)").
func helpDefault(t *testing.T, flag string, args ...string) string {
	t.Helper()
	out, err := runMain(t, append(args, "--help")...)
	if err != nil {
		t.Fatalf("%v --help: %v", args, err)
	}
	m := regexp.MustCompile(`(?m)^\s+--` + regexp.QuoteMeta(flag) + `\b.*\(default ([^)]*)\)\s*$`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("%v --help prints no default for --%s:\n%s", args, flag, out)
	}
	return m[1]
}

// The bounds `relay serve` starts with when no flag sets them: the help prints the documented
// values (docs/security.md, "A relay on the open internet": --body-budget 64 MiB,
// --max-per-client 16, --new-enrolments-per-day 20; README: pushes_per_minute default 120), and
// those values reach the server's options. The relay's tests (relayserver/defaults_test.go) check
// that a relay built with them behaves so.
func TestRelayServeDefaultsAsDocumented(t *testing.T) {
	var lim limitFlags
	cmd := &cobra.Command{}
	lim.add(cmd)
	if err := cmd.ParseFlags(nil); err != nil {
		t.Fatal(err)
	}
	opts := lim.apply(relayserver.Options{})
	for _, c := range []struct {
		flag       string
		documented int64
		applied    int64
	}{
		{"body-budget", 64 << 20, opts.BodyBudget},
		{"max-per-client", 16, int64(opts.MaxPerClient)},
		{"new-enrolments-per-day", 20, int64(opts.NewEnrolmentsPerDay)},
		{"pushes-per-minute", 120, int64(opts.PushesPerMinute)},
	} {
		help, err := strconv.ParseInt(helpDefault(t, c.flag, "relay", "serve"), 10, 64)
		if err != nil || help != c.documented || c.applied != help {
			t.Errorf("--%s: help prints %d (%v), the server gets %d; documented %d", c.flag, help, err, c.applied, c.documented)
		}
	}
}

// `relay deny --help` states how often a running relay reads the list: the documented 5 s
// (docs/relay.md: "Each relay process reads the list every 5 s"); relayserver/defaults_test.go
// checks that a relay reads it on that schedule.
func TestRelayDenyHelpStatesThePollInterval(t *testing.T) {
	out, err := runMain(t, "relay", "deny", "--help")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`reads the list every (\S+);`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("relay deny --help says nothing of the poll interval:\n%s", out)
	}
	d, err := time.ParseDuration(m[1])
	if err != nil || d != 5*time.Second {
		t.Fatalf("relay deny --help: every %q (%v); documented 5s", m[1], err)
	}
}
