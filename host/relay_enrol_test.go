package host

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/relayserver"
	"github.com/agentmbx/agentmbx/relayserver/relaytest"
)

// countingRelay is a real relay behind a front that counts enrolments and successful pulls, and
// can be replaced by an empty relay under the same key and URL (a relay that forgot everyone).
type countingRelay struct {
	url           string
	srv           atomic.Pointer[relayserver.Server]
	mu            sync.Mutex
	enrols, pulls int
}

func startCountingRelay(t *testing.T, seed uint64) (*countingRelay, *relaytest.Relay) {
	t.Helper()
	opts := relayserver.Options{EnrolCallsPerMinute: -1, PushesPerMinute: -1}
	r := relaytest.Start(t, seed, opts)
	c := &countingRelay{}
	c.srv.Store(r.Server)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		rec := httptest.NewRecorder()
		c.srv.Load().ServeHTTP(rec, req)
		c.mu.Lock()
		switch {
		case req.Method == http.MethodPost && strings.HasSuffix(req.URL.Path, "/relay/enrol") && rec.Code == 200:
			c.enrols++
		case req.Method == http.MethodGet && req.URL.Path == "/v2/relay/items" && rec.Code == 200:
			c.pulls++
		}
		c.mu.Unlock()
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		w.Write(rec.Body.Bytes())
	}))
	t.Cleanup(ts.Close)
	c.url = ts.URL
	return c, r
}

func (c *countingRelay) counts() (enrols, pulls int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.enrols, c.pulls
}

// TestDaemonEnrolsOncePerStartAndPerNeed: a daemon that starts with a relay pinned enrols once,
// not once per loop that finds it unenrolled; a relay that forgot the host (an empty store under
// the same key) gets exactly one new enrolment.
func TestDaemonEnrolsOncePerStartAndPerNeed(t *testing.T) {
	relay, first := startCountingRelay(t, 930)
	home := filepath.Join(t.TempDir(), "alpha")
	if err := Init(home, InitOptions{Host: "alpha"}); err != nil {
		t.Fatal(err)
	}
	h, err := Open(home, &Options{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := h.Relay().RelaySet(ctx, api.RelaySetRequest{URL: relay.url, Key: first.Key.Fingerprint()}); err != nil {
		t.Fatal(err)
	}
	h.Close()

	d := runDaemonOpts(t, home, "alpha", DaemonOptions{RelayWait: -1})
	// Enrolled, published, and pulling for a while after.
	waitFor(t, "enrolled and pulling", func() bool {
		st, err := d.h.Relay().RelayStatus(ctx)
		_, pulls := relay.counts()
		return err == nil && st.Enrolled && st.EncAdExp != "" && pulls >= 5
	})
	if err := d.h.relayKeep(ctx, false); err != nil { // a periodic run finds nothing to do
		t.Fatal(err)
	}
	if enrols, _ := relay.counts(); enrols != 1 {
		t.Fatalf("%d enrolments at start, want 1", enrols)
	}

	// The relay forgets everyone: one enrolment brings the host back.
	fresh := relaytest.Start(t, 930, relayserver.Options{EnrolCallsPerMinute: -1, PushesPerMinute: -1})
	_, before := relay.counts()
	relay.srv.Store(fresh.Server)
	waitFor(t, "enrolled again and pulling", func() bool {
		enrols, pulls := relay.counts()
		return enrols >= 2 && pulls >= before+5
	})
	if err := d.h.relayKeep(ctx, false); err != nil {
		t.Fatal(err)
	}
	if enrols, _ := relay.counts(); enrols != 2 {
		t.Fatalf("%d enrolments in all after the relay forgot the host, want 2", enrols)
	}
}
