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
// is not ready; a host whose store is closed under it (as a store that went away) fails the
// write probe too. (The probe's cache is package host/ops's test.)
func TestReadyNeedsTheDaemonAndAWritableStore(t *testing.T) {
	th := newTestHost(t, "alpha", testkit.NewClock(t0))
	rd := th.Ops().Ready(context.Background())
	if rd.Ready || rd.Checks["daemon"] != "not serving" || rd.Checks["store"] != "ok" {
		t.Fatalf("Ready without a daemon = %+v", rd)
	}
	th.mu.Lock()
	th.daemon = true
	th.mu.Unlock()
	srv := httptest.NewServer(th.Ops().Handler(nil))
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
	// filesystem gives; here the database is closed under a host that serves (and was never
	// probed, so no cached answer stands in).
	gone := newTestHost(t, "beta", testkit.NewClock(t0))
	gone.mu.Lock()
	gone.daemon = true
	gone.mu.Unlock()
	if err := gone.db.Close(); err != nil {
		t.Fatal(err)
	}
	rd = gone.Ops().Ready(context.Background())
	if rd.Ready || rd.Checks["store"] != "not writable" || rd.Checks["daemon"] != "ok" {
		t.Fatalf("Ready on a closed store = %+v", rd)
	}
	gsrv := httptest.NewServer(gone.Ops().Handler(nil))
	defer gsrv.Close()
	resp, err := http.Get(gsrv.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 503 || strings.Contains(resp.Header.Get("Content-Type"), "html") {
		t.Fatalf("/readyz on a closed store = %d", resp.StatusCode)
	}
}
