package host

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/agentmbx/agentmbx/internal/testkit"
)

// TestReadyNeedsTheDaemonAndAWritableStore: a host opened without its daemon answers /healthz but
// is not ready; once the store is closed (as a store that went away), the write probe fails too.
func TestReadyNeedsTheDaemonAndAWritableStore(t *testing.T) {
	th := newTestHost(t, "alpha", testkit.NewClock(t0))
	rd := th.Ready(context.Background())
	if rd.Ready || rd.Checks["daemon"] != "not serving" || rd.Checks["store"] != "ok" {
		t.Fatalf("Ready without a daemon = %+v", rd)
	}
	th.mu.Lock()
	th.daemon = true
	th.mu.Unlock()
	srv := httptest.NewServer(th.HealthHandler(nil))
	defer srv.Close()
	for path, want := range map[string]int{"/healthz": 200, "/readyz": 200, "/other": 404} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("%s = %d, want %d", path, resp.StatusCode, want)
		}
	}
	// The store refuses writes: a read-only bbolt handle is what a store on a read-only
	// filesystem gives; here the database is closed under the host.
	th.ops.probeMu.Lock()
	th.ops.probeAt = th.ops.probeAt.AddDate(0, 0, -1) // the probe's one-second cache is over
	th.ops.probeMu.Unlock()
	if err := th.db.Close(); err != nil {
		t.Fatal(err)
	}
	rd = th.Ready(context.Background())
	if rd.Ready || rd.Checks["store"] != "not writable" {
		t.Fatalf("Ready on a closed store = %+v", rd)
	}
	resp, err := http.Get(srv.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 503 || strings.Contains(resp.Header.Get("Content-Type"), "html") {
		t.Fatalf("/readyz on a closed store = %d", resp.StatusCode)
	}
}
