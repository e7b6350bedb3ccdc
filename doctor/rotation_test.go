package doctor

import (
	"strings"
	"testing"

	"github.com/agentmbx/agentmbx/api"
)

func TestCheckRotation(t *testing.T) {
	rot := func(done string) *api.Rotation {
		return &api.Rotation{OldFingerprint: "aaaa-aaaa-aaaa-aaaa", NewFingerprint: "bbbb-bbbb-bbbb-bbbb", Started: "2026-10-02T10:00:00.000Z", Done: done,
			Relay: &api.RotationRelay{URL: "https://relay.example", LastError: "relay down"},
			Peers: []api.RotationPeer{{Host: "beta", LAN: "applied"}, {Host: "gamma", LastError: "connection refused"}}}
	}
	t.Run("never rotated", func(t *testing.T) {
		var r Report
		checkRotation(Env{HomeFlag: "../h"}, api.Status{}, &r)
		if len(r.Checks) != 0 {
			t.Errorf("checks = %+v, want none", r.Checks)
		}
	})
	t.Run("in progress, no daemon", func(t *testing.T) {
		r := Report{OK: true}
		checkRotation(Env{HomeFlag: "../h"}, api.Status{Rotation: rot("")}, &r)
		c := r.Checks[0]
		if c.Status != Warn || !strings.Contains(c.Detail, "relay down") || !strings.Contains(c.Detail, "peer gamma not told yet") ||
			strings.Contains(c.Detail, "beta") || !strings.Contains(c.Fix, "agentmbx daemon") {
			t.Errorf("check = %+v", c)
		}
	})
	t.Run("done", func(t *testing.T) {
		var r Report
		checkRotation(Env{HomeFlag: "../h"}, api.Status{Rotation: rot("2026-10-02T10:05:00.000Z"), Daemon: true}, &r)
		if c := r.Checks[0]; c.Status != OK || !strings.Contains(c.Summary, "aaaa-aaaa-aaaa-aaaa") {
			t.Errorf("check = %+v", c)
		}
	})
	t.Run("a peer that rotated", func(t *testing.T) {
		c := Check{Detail: "reachable"}
		peerRotationDetail(&c, api.Peer{Host: "beta", RotatedAt: "2026-10-02T10:00:00.000Z", RetiredFingerprints: []string{"cccc-cccc-cccc-cccc"}})
		if !strings.Contains(c.Detail, "reachable\nrotated its host key 2026-10-02T10:00:00.000Z") || !strings.Contains(c.Detail, "cccc-cccc-cccc-cccc") {
			t.Errorf("detail = %q", c.Detail)
		}
	})
}
