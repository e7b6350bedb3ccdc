package main

// The README's walkthroughs, run as testscript scripts: each ```sh block after a
// <!-- readme-test: NAME --> marker joins script NAME (blocks of one name run in order, in one
// directory), and each <!-- readme-check: NAME ... --> comment adds its lines to that script as
// they are (testscript commands, checking the output of the command before). A line becomes
//
//	exec sh -c 'LINE'                      every command, as a shell runs it
//	exec sh -c 'exec LINE' &bgN&           a line ending in &, then a wait until it serves
//	                                       (waitdaemon HOME for a daemon, waitport for a relay)
//	exec sh -c 'CMD' + setstdout VAR       VAR=$(CMD): later lines see $VAR
//	relayfp FILE                           after `relay keygen --out FILE` (or `> FILE`): $RELAY_FP is its key's
//	                                       fingerprint
//
// with two kinds of substitution only: each example address 127.0.0.1:PORT becomes a free
// loopback port, and the example relay fingerprint becomes $RELAY_FP. So a README change that
// breaks a command fails the tests (make test, CI).

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/agentmbx/agentmbx/mbx"
)

// readmeFP is the relay fingerprint the README's examples show.
const readmeFP = "a9d0-987f-ae26-edc0"

var (
	readmeMarker = regexp.MustCompile(`^<!-- readme-test: ([a-z0-9-]+)\b`)
	readmeCheck  = regexp.MustCompile(`^<!-- readme-check: ([a-z0-9-]+)\s*$`)
	readmeAddr   = regexp.MustCompile(`127\.0\.0\.1:([1-9][0-9]{3,4})\b`)
	readmeAssign = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_]*)=\$\((.*)\)$`)
	readmeHome   = regexp.MustCompile(`--home (\S+)`)
	shellComment = regexp.MustCompile(`(^|\s+)#(\s.*)?$`)
)

// readmeScripts reads the README's marked blocks and checks into one script body per name.
func readmeScripts(t *testing.T, readme string) map[string][]string {
	t.Helper()
	f, err := os.Open(readme)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	scripts := map[string][]string{}
	var name string
	mode := "" // "", "marked" (a marker seen, its block not yet), "block", "check"
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := sc.Text()
		switch {
		case mode == "check" && strings.TrimSpace(l) == "-->":
			mode = ""
		case mode == "check":
			scripts[name] = append(scripts[name], "check:"+l)
		case mode == "block" && l == "```":
			mode = ""
		case mode == "block":
			scripts[name] = append(scripts[name], l)
		case mode == "marked" && l == "```sh":
			mode = "block"
		case readmeMarker.MatchString(l):
			name, mode = readmeMarker.FindStringSubmatch(l)[1], "marked"
		case readmeCheck.MatchString(l):
			name, mode = readmeCheck.FindStringSubmatch(l)[1], "check"
		}
	}
	if len(scripts) < 2 {
		t.Fatalf("found the walkthroughs %v in the README; the readme-test markers are gone?", slices.Collect(func(yield func(string) bool) {
			for k := range scripts {
				yield(k)
			}
		}))
	}
	return scripts
}

// readmeScript turns one walkthrough's lines into a testscript script.
func readmeScript(t *testing.T, lines []string) string {
	t.Helper()
	ports := map[string]string{}
	var b strings.Builder
	b.WriteString("env GORACE=atexit_sleep_ms=0\nenv MBX_HOME=$WORK/no-default-home\n")
	quote := func(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
	bg := 0
	for _, raw := range lines {
		if check, ok := strings.CutPrefix(raw, "check:"); ok {
			b.WriteString(check + "\n")
			continue
		}
		line := strings.TrimSpace(shellComment.ReplaceAllString(raw, ""))
		if line == "" {
			continue
		}
		line = readmeAddr.ReplaceAllStringFunc(line, func(a string) string {
			if ports[a] == "" {
				ports[a] = freePort(t)
			}
			return ports[a]
		})
		line = strings.ReplaceAll(line, readmeFP, "$RELAY_FP")
		if cmd, ok := strings.CutSuffix(line, "&"); ok {
			cmd = strings.TrimSpace(cmd)
			bg++
			if i := strings.Index(cmd, "agentmbx "); i >= 0 {
				cmd = cmd[:i] + "exec " + cmd[i:] // the shell becomes the program: testscript stops it at the end
			}
			fmt.Fprintf(&b, "exec sh -c %s &bg%d&\n", quote(cmd), bg)
			switch m := readmeHome.FindStringSubmatch(cmd); {
			case strings.Contains(cmd, "relay serve"):
				addr := readmeAddr.FindString(cmd)
				if addr == "" {
					addr = strings.TrimPrefix(regexp.MustCompile(`--listen (\S+)`).FindStringSubmatch(cmd)[1], "")
				}
				fmt.Fprintf(&b, "waitport %s\n", addr)
			case m != nil:
				fmt.Fprintf(&b, "waitdaemon %s\n", m[1])
			default:
				t.Fatalf("README: a background line that is neither a relay nor a daemon with --home: %q", raw)
			}
			continue
		}
		if m := readmeAssign.FindStringSubmatch(line); m != nil {
			fmt.Fprintf(&b, "exec sh -c %s\nsetstdout %s\n", quote(m[2]), m[1])
			continue
		}
		fmt.Fprintf(&b, "exec sh -c %s\n", quote(line))
		if strings.Contains(line, "relay keygen") {
			f := regexp.MustCompile(`(?:--out +|> *)([^\s)]+)\)?$`).FindStringSubmatch(line)
			if f == nil {
				t.Fatalf("README: a keygen line that writes no file: %q", raw)
			}
			fmt.Fprintf(&b, "relayfp %s\n", f[1])
		}
	}
	return b.String()
}

// readmeCmds are the script commands the README scripts use beside scriptCmds.
var readmeCmds = map[string]func(ts *testscript.TestScript, neg bool, args []string){
	// setstdout VAR sets $VAR to the last command's standard output, trimmed.
	"setstdout": func(ts *testscript.TestScript, neg bool, args []string) {
		if neg || len(args) != 1 {
			ts.Fatalf("usage: setstdout VAR")
		}
		ts.Setenv(args[0], strings.TrimSpace(ts.ReadFile("stdout")))
	},
	// relayfp FILE sets $RELAY_FP to the fingerprint of the relay key in FILE, which must be
	// readable by its owner only.
	"relayfp": func(ts *testscript.TestScript, neg bool, args []string) {
		if neg || len(args) != 1 {
			ts.Fatalf("usage: relayfp FILE")
		}
		fi, err := os.Stat(ts.MkAbs(args[0]))
		ts.Check(err)
		if fi.Mode().Perm()&0o077 != 0 {
			ts.Fatalf("%s holds a secret key but is mode %v", args[0], fi.Mode().Perm())
		}
		k, err := mbx.SigningKeyFromSeed(strings.TrimSpace(ts.ReadFile(args[0])))
		ts.Check(err)
		ts.Setenv("RELAY_FP", k.Fingerprint())
	},
	// waitport HOST:PORT waits (up to a minute) until something listens there.
	"waitport": func(ts *testscript.TestScript, neg bool, args []string) {
		if neg || len(args) != 1 {
			ts.Fatalf("usage: waitport HOST:PORT")
		}
		for deadline := time.Now().Add(time.Minute); ; {
			c, err := net.DialTimeout("tcp", args[0], time.Second)
			if err == nil {
				c.Close()
				return
			}
			if time.Now().After(deadline) {
				ts.Fatalf("nothing listens on %s: %v", args[0], err)
			}
			time.Sleep(20 * time.Millisecond) // a real child process starting
		}
	},
}

// TestREADMEWalkthroughs runs every marked walkthrough of the README as a testscript script.
func TestREADMEWalkthroughs(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test")
	}
	dir := t.TempDir()
	for name, lines := range readmeScripts(t, filepath.Join("..", "..", "README.md")) {
		script := "# the README's walkthrough " + name + ", generated by readme_test.go\n" + readmeScript(t, lines)
		if err := os.WriteFile(filepath.Join(dir, "readme-"+name+".txtar"), []byte(script), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cmds := map[string]func(ts *testscript.TestScript, neg bool, args []string){}
	for k, v := range scriptCmds {
		cmds[k] = v
	}
	for k, v := range readmeCmds {
		cmds[k] = v
	}
	testscript.Run(t, testscript.Params{Dir: dir, Cmds: cmds})
}

// TestREADMEScriptGeneration: the translation of README lines, on a sample.
func TestREADMEScriptGeneration(t *testing.T) {
	got := readmeScript(t, []string{
		"agentmbx relay keygen --out relay.seed   # a comment",
		"(umask 077; agentmbx relay keygen > old.seed)",
		"MBX_RELAY_KEY=$(cat relay.seed) agentmbx relay serve --store-dir ./relay --listen 127.0.0.1:7374 &",
		"agentmbx daemon --home ./a &",
		"id=$(agentmbx send --home ./a --as alice --to bob -m \"it's\")",
		"agentmbx relay set http://127.0.0.1:7374 --key " + readmeFP + " --home ./a",
		"check:stdout 'x'",
	})
	for _, want := range []string{
		"exec sh -c 'agentmbx relay keygen --out relay.seed'\nrelayfp relay.seed\n",
		"exec sh -c '(umask 077; agentmbx relay keygen > old.seed)'\nrelayfp old.seed\n",
		"exec sh -c 'MBX_RELAY_KEY=$(cat relay.seed) exec agentmbx relay serve --store-dir ./relay --listen 127.0.0.1:",
		"' &bg1&\nwaitport 127.0.0.1:",
		"exec sh -c 'exec agentmbx daemon --home ./a' &bg2&\nwaitdaemon ./a\n",
		"exec sh -c 'agentmbx send --home ./a --as alice --to bob -m \"it''s\"'\nsetstdout id\n",
		" --key $RELAY_FP --home ./a'\n",
		"stdout 'x'\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("script lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "7374") {
		t.Errorf("the example port was not replaced:\n%s", got)
	}
}
