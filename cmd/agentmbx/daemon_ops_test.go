package main

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/agentmbx/agentmbx/client"
)

// socketGet GETs path over a host's control socket.
func socketGet(t *testing.T, home, path string) (int, string) {
	t.Helper()
	sock := client.SocketPath(home)
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	resp, err := c.Get("http://agentmbx" + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// promValue finds `name{labels} value` in a scrape; -1 when absent.
func promValue(scrape, series string) float64 {
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`)
	m := re.FindStringSubmatch(scrape)
	if m == nil {
		return -1
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}

// TestE2EDaemonMetricsAndHealth runs a daemon with --metrics-listen and JSON logs, sends one
// message over the LAN, and reads the daemon's metrics, health over both the metrics listener
// and the control socket, and its log.
func TestE2EDaemonMetricsAndHealth(t *testing.T) {
	_, a, b := twoNodes(t)
	a.must("agents", "add", "alice")
	b.must("agents", "add", "bob")
	metricsFile := a.home + ".metrics"
	a.daemonArgs = []string{"--metrics-listen", "127.0.0.1:0", "--metrics-addr-file", metricsFile, "--log-format", "json", "--log-level", "debug"}
	a.start()
	b.start()
	pinCards(t, a, b)
	id := a.send("alice", "bob@beta", "hello", "metered")
	a.waitSent(id, "delivered", "bob@beta")

	raw, err := os.ReadFile(metricsFile)
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + strings.TrimSpace(string(raw))
	var scrape string
	a.waitFor("the metrics to show the delivery and its receipt", func() (bool, string) {
		_, scrape = httpGet(t, base+"/metrics", "")
		ok := promValue(scrape, `agentmbx_daemon_deliveries_total{outcome="delivered",transport="lan"}`) == 1 &&
			promValue(scrape, `agentmbx_daemon_receipts_applied_total`) >= 1 &&
			promValue(scrape, `agentmbx_daemon_outbox_rows{state="done"}`) == 1
		return ok, scrape
	})
	for series, want := range map[string]float64{
		`agentmbx_daemon_outbox_rows{state="pending"}`:                       0,
		`agentmbx_daemon_outbox_oldest_pending_age_seconds`:                  0,
		`agentmbx_daemon_deliveries_total{outcome="failed",transport="lan"}`: 0,
		`agentmbx_daemon_quarantine_items`:                                   0,
		`agentmbx_daemon_relay_link{state="none"}`:                           1,
		`agentmbx_daemon_relay_link{state="ok"}`:                             0,
		`agentmbx_daemon_state_ok`:                                           1,
	} {
		if got := promValue(scrape, series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
	for _, get := range []func(path string) (int, string){
		func(p string) (int, string) { return httpGet(t, base+p, "") },
		func(p string) (int, string) { return socketGet(t, a.home, p) },
	} {
		if code, body := get("/healthz"); code != 200 || !strings.Contains(body, `"ok":true`) {
			t.Errorf("/healthz = %d %s", code, body)
		}
		if code, body := get("/readyz"); code != 200 || !strings.Contains(body, `"ready":true`) {
			t.Errorf("/readyz = %d %s", code, body)
		}
	}
	log := a.d.Log.String()
	a.stop()
	for _, line := range strings.Split(strings.TrimSpace(log), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("a daemon log line is not JSON: %q", line)
		}
	}
	for _, f := range []string{"host.key", "enc.key"} {
		var kf struct {
			PrivateKey string `json:"privateKey"`
		}
		raw, err := os.ReadFile(filepath.Join(a.home, f))
		if err != nil || json.Unmarshal(raw, &kf) != nil || kf.PrivateKey == "" {
			t.Fatalf("%s: %v", f, err)
		}
		if strings.Contains(log, kf.PrivateKey) || strings.Contains(scrape, kf.PrivateKey) {
			t.Fatalf("the daemon's log or metrics carry the private key of %s", f)
		}
	}
	if !strings.Contains(log, `"msg":"daemon metrics serving"`) {
		t.Errorf("the log does not say where metrics serve:\n%s", log)
	}
}
