package main

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentmbx/agentmbx/doctor"
	"github.com/agentmbx/agentmbx/host"
)

// shellWords splits a command line as a POSIX shell does for the quoting shellquote writes:
// words apart at spaces, single quotes taken literally.
func shellWords(t *testing.T, line string) []string {
	t.Helper()
	var words []string
	var cur strings.Builder
	in, have := false, false
	for _, r := range line {
		switch {
		case r == '\'':
			in, have = !in, true
		case r == ' ' && !in:
			if have {
				words = append(words, cur.String())
			}
			cur.Reset()
			have = false
		default:
			cur.WriteRune(r)
			have = true
		}
	}
	if in {
		t.Fatalf("unbalanced quote in %q", line)
	}
	if have {
		words = append(words, cur.String())
	}
	return words
}

// checkFixLine fails the test unless every agentmbx command in line (parts joined by &&) names
// a real command with flags it takes and, for a host command, carries --home home.
func checkFixLine(t *testing.T, line, home string) {
	t.Helper()
	for _, part := range strings.Split(line, " && ") {
		words := shellWords(t, part)
		if len(words) == 0 || words[0] != "agentmbx" {
			continue
		}
		root := newRootCmd()
		cmd, rest, err := root.Find(words[1:])
		if err != nil || cmd == root {
			t.Errorf("fix %q: no such command: %v", line, err)
			continue
		}
		if err := cmd.ParseFlags(rest); err != nil {
			t.Errorf("fix %q: %v", line, err)
			continue
		}
		if err := cmd.ValidateArgs(cmd.Flags().Args()); err != nil {
			t.Errorf("fix %q: %v", line, err)
		}
		if f := cmd.Flags().Lookup("home"); f != nil && f.Value.String() != home {
			t.Errorf("fix %q: --home is %q, want %q (the home the command was given)", line, f.Value.String(), home)
		}
	}
}

// TestUnknownCommandsAndFlagsFail: a typo in a subcommand or a flag exits 2 and names the
// nearest command or flag; nothing runs.
func TestUnknownCommandsAndFlagsFail(t *testing.T) {
	cases := []struct {
		args      []string
		err, hint string
	}{
		{[]string{"relay", "nosuch"}, `unknown command "nosuch" for "agentmbx relay"`, "`agentmbx relay --help` lists its commands"},
		{[]string{"relay", "statsu"}, `unknown command "statsu" for "agentmbx relay"`, "did you mean `agentmbx relay status`?"},
		{[]string{"daemon", "stpo"}, `unknown command "stpo" for "agentmbx daemon"`, "did you mean `agentmbx daemon stop`?"},
		{[]string{"peers", "remvoe", "x"}, `unknown command "remvoe" for "agentmbx peers"`, "did you mean `agentmbx peers remove`?"},
		{[]string{"snd"}, `unknown command "snd" for "agentmbx"`, "did you mean `agentmbx id` or `agentmbx send` or `agentmbx sent`?"},
		{[]string{"inbox", "--limt", "3"}, "unknown flag: --limt", "did you mean --limit?"},
		{[]string{"relay", "serve", "--stor-dir", "x"}, "unknown flag: --stor-dir", "did you mean --store-dir?"},
	}
	for _, c := range cases {
		out, errOut, code := runCLI(t, c.args...)
		if code != 2 || out != "" || !strings.Contains(errOut, c.err) || !strings.Contains(errOut, "hint: "+c.hint) {
			t.Errorf("agentmbx %s: exit %d, stdout %q, stderr %q; want exit 2, %q and hint %q", strings.Join(c.args, " "), code, out, errOut, c.err, c.hint)
		}
	}
	// A group of commands without a subcommand shows its help and exits 0.
	if out, _, code := runCLI(t, "relay"); code != 0 || !strings.Contains(out, "Available Commands") {
		t.Errorf("agentmbx relay: exit %d, %q", code, out)
	}
}

// TestDoctorFixesCarryHome: doctor run with --home prints fixes that are real commands with
// that --home (and parse as such), and without --home, fixes without one.
func TestDoctorFixesCarryHome(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	if err := host.Init("my home", host.InitOptions{Host: "desk"}); err != nil {
		t.Fatal(err)
	}
	// Problems with fixes: no daemon (daemon), a key file others can read (chmod).
	if err := os.Chmod(filepath.Join("my home", "host.key"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, _ := runCLI(t, "doctor", "--json", "--home", "my home")
	var rep doctor.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	n := 0
	for _, c := range rep.Checks {
		if c.Fix == "" {
			continue
		}
		n++
		checkFixLine(t, c.Fix, "my home")
		if strings.HasPrefix(c.Fix, "agentmbx") && !strings.Contains(c.Fix, "--home 'my home'") {
			t.Errorf("fix %q lacks --home 'my home'", c.Fix)
		}
	}
	if n < 2 {
		t.Fatalf("doctor gave %d fixes, want the daemon's and the modes': %+v", n, rep.Checks)
	}
	t.Setenv(host.EnvHome, filepath.Join(dir, "my home"))
	out, _, _ = runCLI(t, "doctor")
	if !strings.Contains(out, "fix: agentmbx daemon\n") {
		t.Errorf("without --home the daemon fix should be plain `agentmbx daemon`:\n%s", out)
	}
}

// TestAgentFromEnv: every command with --as takes the agent from $MBX_AGENT when --as is not
// given, and a command that needs one says so when neither is.
func TestAgentFromEnv(t *testing.T) {
	home := filepath.Join(t.TempDir(), "h")
	if err := host.Init(home, host.InitOptions{Host: "desk"}); err != nil {
		t.Fatal(err)
	}
	t.Setenv(envAgent, "")
	if _, errOut, code := runCLI(t, "inbox", "--home", home); code != 2 || !strings.Contains(errOut, "give --as NAME or set MBX_AGENT") {
		t.Fatalf("inbox without an agent: exit %d, %q", code, errOut)
	}
	if _, errOut, code := runCLI(t, "agents", "add", "bob", "--home", home); code != 0 {
		t.Fatal(errOut)
	}
	t.Setenv(envAgent, "alice")
	if out, errOut, code := runCLI(t, "send", "--home", home, "--to", "bob", "-m", "hi"); code != 0 {
		t.Fatalf("send with MBX_AGENT: exit %d, %q %q", code, out, errOut)
	}
	t.Setenv(envAgent, "bob")
	out, errOut, code := runCLI(t, "inbox", "--home", home, "--json")
	if code != 0 || !strings.Contains(out, `"from": "alice@desk"`) {
		t.Fatalf("inbox with MBX_AGENT=bob: exit %d, %q %q", code, out, errOut)
	}
	// --as wins over the environment.
	if out, _, _ := runCLI(t, "inbox", "--home", home, "--as", "alice", "--json"); strings.TrimSpace(out) != "[]" {
		t.Fatalf("inbox --as alice shows bob's mail: %s", out)
	}
	// Every command with --as says $MBX_AGENT in its help.
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if f := c.Flags().Lookup("as"); f != nil && !strings.Contains(f.Usage, "$MBX_AGENT") {
			t.Errorf("%s --as does not say it defaults to $MBX_AGENT", c.CommandPath())
		}
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(newRootCmd())
}

// TestShortIDsAckAndListings: tables show ids as short unique prefixes and times relative to
// now; read, ack, reply, thread and sent take such a prefix; ack takes several ids, or --all;
// the outbox has a KIND column; search --json is an array like every other listing.
func TestShortIDsAckAndListings(t *testing.T) {
	home := filepath.Join(t.TempDir(), "h")
	if err := host.Init(home, host.InitOptions{Host: "desk"}); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) string {
		t.Helper()
		out, errOut, code := runCLI(t, append(args, "--home", home)...)
		if code != 0 {
			t.Fatalf("agentmbx %s: exit %d: %s", strings.Join(args, " "), code, errOut)
		}
		return out
	}
	run("agents", "add", "bob")
	var ids []string
	for _, s := range []string{"one", "two", "three"} {
		ids = append(ids, strings.TrimSpace(run("send", "--as", "alice", "--to", "bob", "--subject", s, "-m", "deploy "+s)))
	}
	table := run("inbox", "--as", "bob")
	short := shortIDs(ids)
	for _, id := range ids {
		s := short[id]
		if len(s) < shortIDMin || len(s) >= len(id) && ids[0][:shortIDMin] != ids[1][:shortIDMin] {
			t.Errorf("short id of %s is %q", id, s)
		}
		if !strings.Contains(table, "\n"+s+"\t") || strings.Contains(table, id+"\t") && len(s) < len(id) {
			t.Errorf("inbox table does not show %s as %s:\n%s", id, s, table)
		}
	}
	if !strings.Contains(table, "\tAGE\n") || !strings.Contains(table, "\tnow\n") && !strings.Contains(table, "s ago\n") {
		t.Errorf("inbox table has no relative AGE:\n%s", table)
	}
	// read by the prefix the table shows (in lower case, too).
	if out := run("read", "--as", "bob", strings.ToLower(short[ids[0]])); !strings.Contains(out, ids[0]) {
		t.Errorf("read by prefix:\n%s", out)
	}
	// ack two ids by prefix, then --all acks the one left.
	out := run("ack", "--as", "bob", short[ids[0]], short[ids[1]])
	if out != "acked "+ids[0]+"\nacked "+ids[1]+"\n" {
		t.Errorf("ack of two ids printed %q", out)
	}
	var acked []map[string]any
	if err := json.Unmarshal([]byte(run("ack", "--as", "bob", "--all", "--json")), &acked); err != nil || len(acked) != 1 || acked[0]["id"] != ids[2] {
		t.Errorf("ack --all acked %v (%v), want only %s", acked, err, ids[2])
	}
	if out := run("ack", "--as", "bob", "--all"); out != "nothing to acknowledge for bob\n" {
		t.Errorf("second ack --all: %q", out)
	}
	if _, errOut, code := runCLI(t, "ack", "--as", "bob", "--home", home); code != 2 || !strings.Contains(errOut, "name message ids or --all") {
		t.Errorf("ack with nothing: exit %d %q", code, errOut)
	}
	// An unknown prefix acknowledges nothing, even with good ids beside it.
	if _, errOut, code := runCLI(t, "ack", "--as", "bob", ids[0], "7ZZZZZZZZZZZ", "--home", home); code == 0 || !strings.Contains(errOut, "no message id begins with 7ZZZZZZZZZZZ") {
		t.Errorf("ack with an unknown prefix: exit %d %q", code, errOut)
	}
	if out := run("thread", short[ids[1]]); !strings.Contains(out, ids[1]) {
		t.Errorf("thread by prefix:\n%s", out)
	}
	// search --json: an array of messages, like inbox --json.
	var found []map[string]any
	if err := json.Unmarshal([]byte(run("search", "deploy", "--json")), &found); err != nil || len(found) != 3 {
		t.Errorf("search --json = %v (%v), want an array of 3 messages", found, err)
	}
	// The outbox has a KIND column (a message to a peer that is never reached stays pending).
	far := filepath.Join(t.TempDir(), "far")
	if err := host.Init(far, host.InitOptions{Host: "far"}); err != nil {
		t.Fatal(err)
	}
	card, _, code := runCLI(t, "id", "--card", "--addr", "127.0.0.1:9", "--home", far)
	if code != 0 {
		t.Fatal("card")
	}
	cardFile := filepath.Join(t.TempDir(), "far.card")
	os.WriteFile(cardFile, []byte(card), 0o600)
	run("peers", "add", cardFile, "--yes")
	id := strings.TrimSpace(run("send", "--as", "alice", "--to", "bob@far", "-m", "hi"))
	ob := run("outbox")
	if !strings.HasPrefix(ob, "MSG_ID\tKIND\tHOST\tSTATE\t") || !strings.Contains(ob, "\tenvelope\tfar\tpending\t") {
		t.Errorf("outbox table without KIND:\n%s", ob)
	}
	if out := run("sent", id[:14]); !strings.Contains(out, "id:      "+id+"\n") {
		t.Errorf("sent by prefix:\n%s", out)
	}
}

func TestAgoAndShortIDs(t *testing.T) {
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct{ in, want string }{
		{"", ""}, {"bad", "bad"},
		{"2026-12-04T12:00:00.400Z", "now"}, {"2026-12-04T11:59:20.000Z", "40s ago"},
		{"2026-12-04T11:57:00.000Z", "3m ago"}, {"2026-12-04T07:00:00.000Z", "5h ago"},
		{"2026-12-01T12:00:00.000Z", "3d ago"}, {"2026-12-04T12:00:40.000Z", "in 40s"},
	} {
		if got := ago(c.in, now); got != c.want {
			t.Errorf("ago(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	a, b, c := "01KBN3V4Q0X5J8Y9Z0A1B2C3D4", "01KBN3V4Q0X5J8Y9Z0A1B2C3D5", "01KBN3W000000000000000000A"
	got := shortIDs([]string{a, b, c, "not-an-id"})
	if got[a] != a || got[b] != b || got[c] != c[:shortIDMin] || got["not-an-id"] != "not-an-id" {
		t.Errorf("shortIDs = %v", got)
	}
}

// TestCompletionOffersAgentsPeersAndIDs: cobra's dynamic completion (what the shell scripts of
// `agentmbx completion` call) offers this host's agents for --as, its peers for peers remove, and
// message ids for the commands that take one.
func TestCompletionOffersAgentsPeersAndIDs(t *testing.T) {
	home := filepath.Join(t.TempDir(), "h")
	far := filepath.Join(t.TempDir(), "far")
	for _, h := range []struct{ dir, name string }{{home, "desk"}, {far, "far"}} {
		if err := host.Init(h.dir, host.InitOptions{Host: h.name}); err != nil {
			t.Fatal(err)
		}
	}
	run := func(args ...string) string {
		t.Helper()
		out, errOut, code := runCLI(t, args...)
		if code != 0 {
			t.Fatalf("agentmbx %s: exit %d: %s", strings.Join(args, " "), code, errOut)
		}
		return out
	}
	run("agents", "add", "bob", "--home", home)
	run("agents", "add", "bella", "--home", home)
	card := filepath.Join(t.TempDir(), "far.card")
	if err := os.WriteFile(card, []byte(run("id", "--card", "--home", far)), 0o600); err != nil {
		t.Fatal(err)
	}
	run("peers", "add", card, "--yes", "--home", home)
	id := strings.TrimSpace(run("send", "--as", "alice", "--to", "bob", "-m", "hi", "--home", home))
	complete := func(args ...string) []string {
		t.Helper()
		out := run(append([]string{cobra.ShellCompRequestCmd}, args...)...)
		var got []string
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			if !strings.HasPrefix(l, ":") && !strings.HasPrefix(l, "Completion ended") {
				got = append(got, l)
			}
		}
		return got
	}
	if got := complete("inbox", "--home", home, "--as", "b"); strings.Join(got, ",") != "bella,bob" {
		t.Errorf("--as completes to %v, want bella, bob", got)
	}
	if got := complete("peers", "remove", "--home", home, ""); strings.Join(got, ",") != "far" {
		t.Errorf("peers remove completes to %v, want far", got)
	}
	if got := complete("read", "--home", home, "--as", "bob", id[:4]); strings.Join(got, ",") != id {
		t.Errorf("read completes to %v, want %s", got, id)
	}
	if got := complete("ack", "--home", home, "--as", "bob", id, ""); strings.Join(got, ",") != id {
		t.Errorf("ack's second id completes to %v, want %s", got, id)
	}
}

// TestManPages: gen-man (make man) writes a page for every visible command.
func TestManPages(t *testing.T) {
	dir := t.TempDir()
	if _, errOut, code := runCLI(t, "gen-man", dir); code != 0 {
		t.Fatal(errOut)
	}
	for _, page := range []string{"agentmbx.1", "agentmbx-send.1", "agentmbx-daemon-stop.1", "agentmbx-relay-serve.1"} {
		b, err := os.ReadFile(filepath.Join(dir, page))
		if err != nil || !strings.Contains(string(b), ".SH NAME") {
			t.Errorf("%s: %v\n%.200s", page, err, b)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "agentmbx-gen-man.1")); err == nil {
		t.Error("the hidden gen-man command got a page")
	}
}

// TestQuarantineActionsCLI: the command line of relay quarantine release and purge (their work
// is tested in package host): errors, usage errors and the --json shapes.
func TestQuarantineActionsCLI(t *testing.T) {
	home := filepath.Join(t.TempDir(), "h")
	if err := host.Init(home, host.InitOptions{Host: "desk"}); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := runCLI(t, "relay", "quarantine", "release", "deadbeef00", "--home", home); code != 1 || !strings.Contains(errOut, "no quarantined item has an id beginning deadbeef00") {
		t.Errorf("release of an unknown id: exit %d %q", code, errOut)
	}
	if _, errOut, code := runCLI(t, "relay", "quarantine", "purge", "--home", home); code != 2 || !strings.Contains(errOut, "--older-than is required") {
		t.Errorf("purge without --older-than: exit %d %q", code, errOut)
	}
	if _, _, code := runCLI(t, "relay", "quarantine", "purge", "--older-than", "5s", "--home", home); code != 2 {
		t.Errorf("purge --older-than 5s: exit %d, want 2", code)
	}
	if out, errOut, code := runCLI(t, "relay", "quarantine", "purge", "--older-than", "720h", "--json", "--home", home); code != 0 || strings.TrimSpace(out) != "[]" {
		t.Errorf("purge --json: exit %d %q %q", code, out, errOut)
	}
	if out, _, code := runCLI(t, "relay", "quarantine", "purge", "--older-than", "720h", "--home", home); code != 0 || out != "purged 0 items held longer than 720h0m0s\n" {
		t.Errorf("purge: exit %d %q", code, out)
	}
}

// TestUserMessage: errors are shown without the Go packages they passed through, but with the
// command the user ran, and one invalid-input word.
func TestUserMessage(t *testing.T) {
	for in, want := range map[string]string{
		"host: relay set: invalid input: invalid relay client input: relay URL \"x\" has no scheme": "relay set: invalid input: relay URL \"x\" has no scheme",
		"host: sent: message X: not found":                                 "sent: message X: not found",
		"outbox: bad --limit 501":                                          "outbox: bad --limit 501",
		"inbox: pull: relayclient: pull: relay unreachable: refused":       "inbox: pull: pull: relay unreachable: refused",
		"client: dial /x/agentmbx.sock: sqlitestore: open: disk I/O error": "dial /x/agentmbx.sock: open: disk I/O error",
	} {
		if got := userMessage(errors.New(in)); got != want {
			t.Errorf("userMessage(%q) = %q, want %q", in, got, want)
		}
	}
}
