package main

import (
	"context"
	"encoding/json"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/agentmbx/agentmbx/demo"
	"github.com/agentmbx/agentmbx/host/mailstore"
	"github.com/agentmbx/agentmbx/internal/failpoint"
)

// TestE2EDemo runs `agentmbx demo` as a user does, twice: plain (the summary line, exit 0) and
// with --json (the same figures). Each run starts a relay and two daemons and takes a few
// seconds (about 10 s each under -race here).
func TestE2EDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test")
	}
	t.Setenv("TMPDIR", t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), 3*e2eWait)
	defer cancel()
	cmd := exec.CommandContext(ctx, agentmbxPath(t), "demo")
	cmd.Env = childEnv()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("agentmbx demo: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`(?m)^demo: sent=(\d+) delivered=(\d+) lost=0 duplicated=0 went_back=0 \(`).FindStringSubmatch(string(out))
	if m == nil || m[1] != m[2] || m[1] == "0" {
		t.Fatalf("no clean summary line:\n%s", out)
	}
	for _, want := range []string{"SIGKILL the relay", "restore drill", "agentmbx inbox --as bob --all", " 0 fail, "} {
		if !strings.Contains(string(out), want) {
			t.Errorf("demo output lacks %q", want)
		}
	}

	cmd = exec.CommandContext(ctx, agentmbxPath(t), "demo", "--json")
	cmd.Env = childEnv()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	js, err := cmd.Output()
	if err != nil {
		t.Fatalf("agentmbx demo --json: %v\n%s", err, stderr.String())
	}
	var res demo.Result
	if err := json.Unmarshal(js, &res); err != nil {
		t.Fatalf("demo --json printed %q: %v", js, err)
	}
	if !res.OK || res.Sent == 0 || res.Delivered != res.Sent || res.Lost != 0 || res.Duplicated != 0 || res.WentBack != 0 || res.Dir != "" {
		t.Fatalf("demo --json = %+v", res)
	}
	if !strings.Contains(stderr.String(), "[8/8]") {
		t.Errorf("the narration did not go to stderr:\n%s", stderr.String())
	}
}

// TestE2EDemoOracleSelfTest runs the demo with the daemons' dedup turned off (the failpoint
// mailstore.FailSkipDedup): the restore drill hands work the mail it already had, so the demo's
// oracle must count a second delivery of each of those copies, see the one bob read go back to
// unread, and fail. An oracle that counts mailbox rows would pass this run.
func TestE2EDemoOracleSelfTest(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test")
	}
	t.Setenv("TMPDIR", t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), 3*e2eWait)
	defer cancel()
	var out strings.Builder
	res, err := demo.Run(ctx, demo.Config{Bin: agentmbxPath(t), Out: &out,
		DaemonEnv: []string{failpoint.Env + "=" + mailstore.FailSkipDedup + "=" + failpoint.Error.String()}})
	if err == nil || res.OK || res.Duplicated < 1 || res.WentBack < 1 {
		t.Fatalf("demo with the dedup skipped = %+v, %v; want duplicated and went_back at least 1, and a failure\n%s", res, err, out.String())
	}
	t.Logf("self-test: %s", res.Line())
}
