package main

// The README's relay walkthrough, run as written: every line of the shell blocks marked
// <!-- readme-test --> goes through bash in one directory, in order, with two substitutions
// only: the example relay address 127.0.0.1:7374 becomes a free loopback port, and the example
// fingerprint a9d0-987f-ae26-edc0 becomes the one of the key the walkthrough's own keygen made.
// A line ending in & runs in the background (until the test ends) and the next line waits until
// it serves. So the README cannot drift from what the commands do.

import (
	"bufio"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/internal/testkit"
	"github.com/agentmbx/agentmbx/mbx"
)

const (
	readmeAddr = "127.0.0.1:7374"
	readmeFP   = "a9d0-987f-ae26-edc0"
)

// readmeBlocks returns the lines of the README's shell blocks marked for testing.
func readmeBlocks(t *testing.T) []string {
	t.Helper()
	f, err := os.Open("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []string
	marked, in := false, false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := sc.Text()
		switch {
		case strings.HasPrefix(l, "<!-- readme-test"):
			marked = true
		case marked && l == "```sh":
			in, marked = true, false
		case in && l == "```":
			in = false
		case in:
			lines = append(lines, l)
		}
	}
	if len(lines) < 10 {
		t.Fatalf("found %d walkthrough lines in the README; the <!-- readme-test --> markers are gone?", len(lines))
	}
	return lines
}

var shellComment = regexp.MustCompile(`\s+#\s.*$`)

func TestREADMERelayWalkthrough(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test")
	}
	dir := e2eDir(t)
	addr := freePort(t)
	fp := ""
	env := childEnv()
	clean := env[:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, "MBX_") {
			clean = append(clean, kv)
		}
	}
	env = clean
	var lastOut string
	for _, raw := range readmeBlocks(t) {
		line := strings.TrimSpace(shellComment.ReplaceAllString(raw, ""))
		if line == "" {
			continue
		}
		if strings.Contains(line, readmeFP) && fp == "" {
			t.Fatalf("line %q needs the fingerprint before any keygen ran", raw)
		}
		line = strings.ReplaceAll(strings.ReplaceAll(line, readmeAddr, addr), readmeFP, fp)
		if bg, ok := strings.CutSuffix(line, "&"); ok {
			startBackground(t, dir, env, strings.TrimSpace(bg))
			waitServing(t, dir, line, addr)
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), e2eCmd)
		cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", line)
		cmd.Dir, cmd.Env = dir, env
		var errb strings.Builder
		cmd.Stderr = &errb
		out, err := cmd.Output()
		cancel()
		if err != nil {
			t.Fatalf("README line %q: %v\nstdout: %s\nstderr: %s", raw, err, out, errb.String())
		}
		lastOut = string(out)
		if strings.Contains(line, "relay keygen") {
			seed, err := os.ReadFile(filepath.Join(dir, "relay.seed"))
			if err != nil {
				t.Fatal(err)
			}
			k, err := mbx.SigningKeyFromSeed(strings.TrimSpace(string(seed)))
			if err != nil {
				t.Fatalf("keygen's key: %v", err)
			}
			fp = k.Fingerprint()
			if !strings.Contains(errb.String(), "relay key fingerprint: "+fp) || !strings.Contains(errb.String(), "MBX_RELAY_KEY=") {
				t.Fatalf("keygen's stderr lacks the fingerprint and the usage:\n%s", errb.String())
			}
		}
		if strings.Contains(line, "relay info") && !strings.Contains(lastOut, "fingerprint: "+fp) {
			t.Fatalf("relay info shows another key than keygen's %s:\n%s", fp, lastOut)
		}
		if strings.Contains(line, "inbox") && !strings.Contains(lastOut, "hello") {
			t.Fatalf("the mail did not arrive through the relay:\n%s", lastOut)
		}
	}
	if !strings.Contains(lastOut, "doctor:") || !strings.Contains(lastOut, " 0 fail") {
		t.Fatalf("the walkthrough did not end with a clean doctor:\n%s", lastOut)
	}
}

// startBackground runs line in bash in its own process group, stopped (SIGTERM to the group)
// when the test ends.
func startBackground(t *testing.T, dir string, env []string, line string) {
	t.Helper()
	cmd := exec.Command("bash", "-c", line)
	cmd.Dir, cmd.Env = dir, env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	log := &testkit.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(e2eWait):
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
		if t.Failed() {
			t.Logf("%s:\n%s", line, log.String())
		}
	})
}

// waitServing waits until a background relay listens on addr, or a background daemon's control
// socket exists.
func waitServing(t *testing.T, dir, line, addr string) {
	t.Helper()
	ready := func() bool {
		if strings.Contains(line, "relay serve") {
			c, err := net.DialTimeout("tcp", addr, time.Second)
			if err == nil {
				c.Close()
			}
			return err == nil
		}
		m := regexp.MustCompile(`--home (\S+)`).FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("a background line that is neither a relay nor a daemon with --home: %q", line)
		}
		_, err := os.Stat(filepath.Join(dir, m[1], "agentmbx.sock"))
		return err == nil
	}
	for deadline := time.Now().Add(e2eWait); !ready(); {
		if time.Now().After(deadline) {
			t.Fatalf("%q did not start serving", line)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
