package ops

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/bbolt"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/outbox"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// TestReadyProbesTheStoreAtMostOnceASecond: a store write is probed once, and its answer reused
// until ProbeEvery has passed; a store that refuses the write makes the host not ready (503 on
// /readyz, JSON, never an HTML error page) once the cached answer is over.
func TestReadyProbesTheStoreAtMostOnceASecond(t *testing.T) {
	var writes atomic.Int64
	fail := errors.New("read-only file system")
	var refuse atomic.Bool
	c := NewChecker(func() bool { return true }, func() error {
		writes.Add(1)
		if refuse.Load() {
			return fail
		}
		return nil
	}, quiet)
	for range 3 {
		if rd := c.Ready(context.Background()); !rd.Ready || rd.Checks["store"] != "ok" || rd.Checks["daemon"] != "ok" {
			t.Fatalf("Ready = %+v", rd)
		}
	}
	if n := writes.Load(); n != 1 {
		t.Fatalf("%d probe writes for three checks within %v, want 1", n, ProbeEvery)
	}
	refuse.Store(true)
	if rd := c.Ready(context.Background()); !rd.Ready {
		t.Fatalf("the cached probe was not used: %+v", rd)
	}
	c.mu.Lock()
	c.probeAt = c.probeAt.Add(-2 * ProbeEvery) // the cache is over
	c.mu.Unlock()
	srv := httptest.NewServer(c.Handler(nil))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var rd Readiness
	if err := json.NewDecoder(resp.Body).Decode(&rd); err != nil {
		t.Fatalf("/readyz body: %v", err)
	}
	if resp.StatusCode != 503 || !strings.Contains(resp.Header.Get("Content-Type"), "json") ||
		rd.Ready || rd.Checks["store"] != "not writable" || writes.Load() != 2 {
		t.Fatalf("/readyz on a store refusing writes = %d %+v after %d writes", resp.StatusCode, rd, writes.Load())
	}
}

// TestHandlerPassesOtherRequests: /healthz answers while the daemon is not serving, /readyz says
// so, and any other path goes to next.
func TestHandlerPassesOtherRequests(t *testing.T) {
	c := NewChecker(func() bool { return false }, func() error { return nil }, quiet)
	next := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) })
	srv := httptest.NewServer(c.Handler(next))
	defer srv.Close()
	for path, want := range map[string]int{"/healthz": 200, "/readyz": 503, "/metrics": http.StatusTeapot} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("%s = %d, want %d", path, resp.StatusCode, want)
		}
	}
}

// TestSnapshotCountsRowsOutcomesAndTheRelayLink: the snapshot names every outbox state (zeros
// too), the oldest pending row, the counters bumped (outcomes out of range are not counted), and
// the relay link's state with its problems.
func TestSnapshotCountsRowsOutcomesAndTheRelayLink(t *testing.T) {
	db, err := bbolt.Open(filepath.Join(t.TempDir(), "state.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	ob, err := outbox.Open(db, &outbox.Options{Clock: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	key := base64.StdEncoding.EncodeToString(make([]byte, ed25519.PublicKeySize))
	if _, err := ob.Add(context.Background(), outbox.NewRow{Kind: outbox.KindEnvelope, ItemID: "01J0000000000000000000000A",
		Host: "beta", HostKey: key, Wire: []byte(`{"v":3}`)}); err != nil {
		t.Fatal(err)
	}
	rs := api.RelayStatus{Configured: true, Enrolled: true, Quarantined: 2, Problems: []api.RelayProblem{{Op: "pull"}}}
	o := New(Config{Outbox: ob, Logger: quiet, Serving: func() bool { return true }, Write: func() error { return nil },
		RelayStatus: func(context.Context) (api.RelayStatus, error) { return rs, nil }})
	o.Outcome(outbox.TransportLAN, outbox.OutcomeDelivered)
	o.Outcome(outbox.TransportRelay, outbox.OutcomeRelayAccepted)
	o.Outcome(outbox.TransportRelay, outbox.OutcomeRelayAccepted)
	o.Outcome(outbox.Transport(7), outbox.OutcomeDelivered) // out of range: not counted, no panic
	o.Receipt()
	s, err := o.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Outbox) != int(outbox.StateDone-outbox.StatePending)+1 || s.Outbox["pending"] != 1 || s.Outbox["done"] != 0 || !s.OldestPending.Equal(now) {
		t.Fatalf("outbox = %v, oldest %v", s.Outbox, s.OldestPending)
	}
	got := map[string]int64{}
	for _, oc := range s.Outcomes {
		got[oc.Transport+"/"+oc.Outcome] = oc.N
	}
	if got["lan/delivered"] != 1 || got["relay/relay-accepted"] != 2 || len(got) != 7 || s.ReceiptsApplied != 1 {
		t.Fatalf("outcomes = %v, receipts %d", got, s.ReceiptsApplied)
	}
	if _, ok := got["lan/relay-accepted"]; ok {
		t.Fatal("the LAN has no relay-accepted outcome")
	}
	if s.RelayLink != "failing" || s.Quarantined != 2 || len(s.RelayProblems) != 1 || s.RelayProblems[0] != "pull" {
		t.Fatalf("relay = %s, %d quarantined, problems %v", s.RelayLink, s.Quarantined, s.RelayProblems)
	}
	for _, tt := range []struct {
		rs   api.RelayStatus
		want string
	}{
		{api.RelayStatus{}, "none"},
		{api.RelayStatus{Configured: true, Stopped: true, Enrolled: true}, "stopped"},
		{api.RelayStatus{Configured: true}, "not-enrolled"},
		{api.RelayStatus{Configured: true, Enrolled: true}, "ok"},
	} {
		if got := linkState(tt.rs); got != tt.want {
			t.Errorf("linkState(%+v) = %s, want %s", tt.rs, got, tt.want)
		}
	}
}
