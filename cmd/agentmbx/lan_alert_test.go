package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/agentmbx/agentmbx/api"
)

// TestDaemonStatusPrintsLANAlerts: `daemon status` (and `id`, with the same printer) shows each
// LAN alert on its own line, and nothing when there is none.
func TestDaemonStatusPrintsLANAlerts(t *testing.T) {
	st := api.DaemonStatus{Running: true, Host: "alpha", LAN: "listening", Listen: "127.0.0.1:7373", Relay: "none",
		Outbox: map[string]int{}}
	var quiet bytes.Buffer
	printDaemonStatus(&quiet, st)
	if strings.Contains(quiet.String(), "ALERT") {
		t.Fatalf("no alert, but printed:\n%s", quiet.String())
	}
	st.LANAlerts = []api.LANAlert{{Host: "beta", Fingerprint: "1a2b-3c4d-5e6f-7a8b", Addr: "10.0.0.9:7373", Since: "2026-10-02T10:00:00.000Z"}}
	var out bytes.Buffer
	printDaemonStatus(&out, st)
	want := "ALERT:  beta at 10.0.0.9:7373: " + api.LANAlertSummary + " (pinned 1a2b-3c4d-5e6f-7a8b; since 2026-10-02T10:00:00.000Z)"
	if !strings.Contains(out.String(), want) {
		t.Fatalf("printed:\n%s\nwant a line with %q", out.String(), want)
	}
}
