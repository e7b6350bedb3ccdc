package main

import (
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentmbx/agentmbx/host"
	"github.com/agentmbx/agentmbx/relayserver/relaytest/v1only"
)

// TestRelaySetV1: against a relay that speaks only v1, relay set explains that there is no
// identity to pin and refuses --key, refuses without --allow-v1, and with it pins the relay as
// v1; relay status and doctor then say the relay is unauthenticated.
func TestRelaySetV1(t *testing.T) {
	ts := httptest.NewServer(v1only.New(v1only.Options{}))
	t.Cleanup(ts.Close)
	home := filepath.Join(t.TempDir(), "desk")
	if err := host.Init(home, host.InitOptions{Host: "desk"}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"relay", "set", ts.URL, "--home", home}, "--allow-v1"},
		{[]string{"relay", "set", ts.URL, "--key", "a9d0-987f-ae26-edc0", "--home", home}, "no identity to pin"},
		{[]string{"relay", "set", ts.URL, "--key", "a9d0-987f-ae26-edc0", "--allow-v1", "--home", home}, "no identity to pin"},
	} {
		out, errOut, code := runCLI(t, c.args...)
		if code == 0 || !strings.Contains(errOut, c.want) || !strings.Contains(errOut, "v1") {
			t.Errorf("%v: exit %d, stderr %q (stdout %q); want a refusal saying %q", c.args, code, errOut, out, c.want)
		}
	}
	out, errOut, code := runCLI(t, "relay", "set", ts.URL, "--allow-v1", "--home", home)
	if code != 0 || !strings.Contains(out, "v1 only") {
		t.Fatalf("relay set --allow-v1: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	out, _, code = runCLI(t, "relay", "status", "--home", home)
	if code != 0 || !strings.Contains(out, "speaks only v1") {
		t.Fatalf("relay status: exit %d, %q", code, out)
	}
	out, _, _ = runCLI(t, "doctor", "--home", home)
	if !strings.Contains(out, "unauthenticated") || !strings.Contains(out, "v1 only") {
		t.Fatalf("doctor does not warn about the v1 relay:\n%s", out)
	}
}
