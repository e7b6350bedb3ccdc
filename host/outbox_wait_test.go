package host

import (
	"strings"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/outbox"
)

// The wait reason names what the host knows of the link, not the last error alone: each case
// is a row and the facts, and the words the reason must hold.
func TestWaitReason(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	later, before := now.Add(90*time.Second), now.Add(-10*time.Minute)
	okRelay := api.RelayStatus{Configured: true, Enrolled: true}
	pending := outbox.Row{Host: "beta", State: outbox.StatePending, Transport: outbox.TransportLAN, Attempts: 3,
		NextAt: later, LastError: "no LAN address known for beta"}
	lanPeer := map[string]PeerRecord{"beta": {Host: "beta", Addr: "10.0.0.2:7373"}}
	relayOnly := map[string]PeerRecord{"beta": {Host: "beta"}}
	with := func(r outbox.Row, fn func(*outbox.Row)) outbox.Row { fn(&r); return r }
	for _, tc := range []struct {
		name string
		row  outbox.Row
		f    waitFacts
		want []string
		not  []string
	}{
		{"ended", with(pending, func(r *outbox.Row) { r.State = outbox.StateDone }),
			waitFacts{daemon: true, peers: lanPeer}, nil, nil},
		{"held by the relay", with(pending, func(r *outbox.Row) { r.State, r.AcceptedAt = outbox.StateRelayAccepted, before }),
			waitFacts{daemon: true, relay: okRelay, peers: relayOnly},
			[]string{"the relay holds it since 2026-12-03T11:50:00.000Z", "beta's delivery receipt"}, nil},
		{"no daemon", pending, waitFacts{peers: lanPeer, relay: okRelay},
			[]string{"no daemon is running", "agentmbx daemon"}, []string{"no LAN address"}},
		{"unpaired", pending, waitFacts{daemon: true, peers: map[string]PeerRecord{}},
			[]string{"beta is no longer paired"}, nil},
		{"relay stopped, not the LAN address", pending,
			waitFacts{daemon: true, relay: api.RelayStatus{Configured: true, Stopped: true}, peers: relayOnly},
			[]string{"relay use stopped", "relay set"}, []string{"no LAN address"}},
		{"relay failing", pending,
			waitFacts{daemon: true, relay: api.RelayStatus{Configured: true, Enrolled: true,
				Problems: []api.RelayProblem{{Op: "push", Error: "dial tcp 127.0.0.1:7374: connection refused", At: "2026-12-03T11:55:00.000Z"}}}, peers: relayOnly},
			[]string{"the relay is failing since 2026-12-03T11:55:00.000Z", "connection refused"}, []string{"no LAN address"}},
		{"no relay, no address", pending, waitFacts{daemon: true, peers: relayOnly},
			[]string{"no LAN address known for beta and no relay set"}, nil},
		{"paused", with(pending, func(r *outbox.Row) { r.Transport = outbox.TransportRelay }),
			waitFacts{now: now, daemon: true, relay: okRelay, paused: later, peers: relayOnly},
			[]string{"slow down", "until 2026-12-03T12:01:30.000Z", "no attempt is counted"}, nil},
		{"pause over", with(pending, func(r *outbox.Row) { r.Transport, r.LastError = outbox.TransportRelay, "" }),
			waitFacts{now: now, daemon: true, relay: okRelay, paused: before, peers: relayOnly},
			[]string{"next attempt at 2026-12-03T12:01:30.000Z"}, []string{"slow down"}},
		{"peer unreachable", with(pending, func(r *outbox.Row) { r.LastError = "dial tcp 10.0.0.2:7373: i/o timeout" }),
			waitFacts{now: now, daemon: true, peers: lanPeer, lanDown: map[string]time.Time{"beta": before}},
			[]string{"beta unreachable on the LAN (10.0.0.2:7373) since 2026-12-03T11:50:00.000Z", "no relay is set", "next attempt at"}, nil},
		{"quota", with(pending, func(r *outbox.Row) { r.Transport, r.LastError = outbox.TransportRelay, "rejected:quota:sender" }),
			waitFacts{now: now, daemon: true, relay: okRelay, peers: relayOnly},
			[]string{"over a quota at the relay (quota:sender)", "next attempt at"}, nil},
		{"plain failure", with(pending, func(r *outbox.Row) { r.LastError = "HTTP 500" }),
			waitFacts{now: now, daemon: true, peers: lanPeer},
			[]string{"last attempt failed: HTTP 500; next attempt at 2026-12-03T12:01:30.000Z"}, nil},
		{"new row", with(pending, func(r *outbox.Row) { r.LastError, r.Attempts, r.NextAt = "", 0, now }),
			waitFacts{now: now, daemon: true, peers: lanPeer}, []string{"due now"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := waitReason(tc.row, tc.f)
			if tc.want == nil && got != "" {
				t.Fatalf("waitReason = %q, want none", got)
			}
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("waitReason = %q, want it to say %q", got, w)
				}
			}
			for _, n := range tc.not {
				if strings.Contains(got, n) {
					t.Errorf("waitReason = %q, should not say %q", got, n)
				}
			}
		})
	}
}
