package relayserver_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/agentmbx/agentmbx/internal/testkit"
	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/relayserver"
)

// scrape GETs url (with a bearer token when token is set) and parses the Prometheus text.
func scrape(t *testing.T, url, token string) map[string]*dto.MetricFamily {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s = %d %s", url, resp.StatusCode, b)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("the scrape does not parse: %v", err)
	}
	return fams
}

// metric returns the value of the series of name whose labels include want ("k=v" pairs); -1
// when there is none.
func metric(fams map[string]*dto.MetricFamily, name string, want ...string) float64 {
	f := fams[name]
	if f == nil {
		return -1
	}
next:
	for _, m := range f.Metric {
		have := map[string]string{}
		for _, l := range m.Label {
			have[l.GetName()] = l.GetValue()
		}
		for _, kv := range want {
			k, v, _ := strings.Cut(kv, "=")
			if have[k] != v {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue()
		case m.Gauge != nil:
			return m.Gauge.GetValue()
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount())
		}
	}
	return -1
}

func get(t *testing.T, url string) (int, []byte) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// TestMetricsCountKnownTraffic drives known traffic through a relay and reads every counter and
// queue gauge back from a scrape of /metrics on its own listener, behind the token.
func TestMetricsCountKnownTraffic(t *testing.T) {
	t.Parallel()
	const token = "s3cret-metrics-token"
	r := newRelay(t, func(o *relayserver.Options) {
		o.Metrics = relayserver.NewMetrics(2)
		o.MetricsToken = token
	})
	a, b, c, stranger := newHost(t, "alpha", 1), newHost(t, "beta", 2), newHost(t, "gamma", 3), newHost(t, "delta", 4)
	r.enrol(a)
	r.enrol(b)
	r.enrol(c)
	id := func(n int) string { return fmt.Sprintf("01KKNTQ2CN9WJ3MR4Q1P12F%03d", n) }
	// beta gets 3 items, gamma 1 (one item for both): 4 accepted.
	if got := statuses(r.push(a, envItem(id(1), b, c), envItem(id(2), b), envItem(id(3), b))); strings.Join(got, ",") != "accepted,accepted,accepted" {
		t.Fatalf("first push = %v", got)
	}
	conflict := envItem(id(2), b)
	conflict.Targets[0].WireB64 = mbx.B64(envWire(id(2), "X"))
	got := statuses(r.push(a, envItem(id(1), b, c), conflict, envItem(id(4), stranger)))
	if strings.Join(got, ",") != "duplicate,rejected:conflict,rejected:"+relayserver.RejectNotEnrolled {
		t.Fatalf("second push = %v", got)
	}
	if p := r.pull(b, 0); len(p.Items) != 3 {
		t.Fatalf("beta pulled %d items, want 3", len(p.Items))
	} else if code, out := r.call(&b, "POST", "/v2/relay/ack", mustJSON(t, map[string]any{"epoch": p.Epoch, "through": p.Items[0].Seq})); code != 200 {
		t.Fatalf("ack = %d %s", code, out)
	}
	r.pull(c, 0)
	if code, _ := r.tryEnrol(newHost(t, "", 5), ""); code != 400 {
		t.Fatalf("enrol without a name = %d, want 400", code)
	}

	if code, _ := get(t, r.ts.URL+"/no/such/path"); code != http.StatusNotFound {
		t.Fatalf("unknown path = %d", code)
	}
	if code, _ := get(t, r.ts.URL+"/metrics"); code != http.StatusUnauthorized {
		t.Fatalf("/metrics without the token = %d, want 401", code)
	}
	m := scrape(t, r.ts.URL+"/metrics", token)
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"agentmbx_relay_items_total", []string{"result=accepted"}, 3},
		{"agentmbx_relay_items_total", []string{"result=duplicate"}, 1},
		{"agentmbx_relay_items_total", []string{"result=rejected", "code=conflict"}, 1},
		{"agentmbx_relay_items_total", []string{"result=rejected", "code=" + relayserver.RejectNotEnrolled}, 1},
		{"agentmbx_relay_dedup_conflicts_total", nil, 1},
		{"agentmbx_relay_pulls_total", []string{"result=items"}, 2},
		{"agentmbx_relay_pulled_items_total", nil, 4},
		{"agentmbx_relay_acks_total", nil, 1},
		{"agentmbx_relay_acked_items_total", nil, 1},
		{"agentmbx_relay_enrolments_total", []string{"authority=host-key"}, 3},
		{"agentmbx_relay_enrolment_refusals_total", []string{"status=400"}, 1},
		{"agentmbx_relay_requests_total", []string{"route=POST /v2/relay/items", "status=200"}, 2},
		{"agentmbx_relay_requests_total", []string{"route=GET /v2/relay/items", "status=200"}, 2},
		{"agentmbx_relay_requests_total", []string{"route=other", "status=404"}, 1},
		{"agentmbx_relay_queue_items", nil, 3}, // beta 2 (one acked), gamma 1
		{"agentmbx_relay_queue_targets", nil, 2},
		{"agentmbx_relay_queue_top_target_items", []string{"rank=1", "target=" + mbx.Fingerprint(b.pub())}, 2},
		{"agentmbx_relay_queue_top_target_items", []string{"rank=2", "target=" + mbx.Fingerprint(c.pub())}, 1},
		{"agentmbx_relay_enrolments_live", nil, 3},
		{"agentmbx_relay_store_stats_ok", nil, 1},
		{"agentmbx_relay_epoch_info", []string{"epoch=" + r.srv.Epoch(), "relay_key=" + r.key.Fingerprint()}, 1},
		{"agentmbx_relay_long_polls_parked", nil, 0},
		{"agentmbx_relay_queue_oldest_item_age_seconds", nil, 0}, // the test clock has not moved
	} {
		if got := metric(m, c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	if n := metric(m, "agentmbx_relay_queue_bytes"); n <= 0 {
		t.Errorf("queue_bytes = %v, want the queued wire bytes", n)
	}
	if n := metric(m, "agentmbx_relay_store_size_bytes"); n <= 0 {
		t.Errorf("store_size_bytes = %v, want the database's size", n)
	}
	// Every committed transaction is observed: enrolments, pushes, the ack, key binding.
	if n := metric(m, "agentmbx_relay_commit_seconds"); n < 6 {
		t.Errorf("commit_seconds has %v observations, want one per commit (at least 6)", n)
	}
	if n := metric(m, "agentmbx_relay_commit_units"); n < 6 {
		t.Errorf("commit_units has %v observations, want at least 6", n)
	}
	// Only two targets are named, however many there are.
	if f := m["agentmbx_relay_queue_top_target_items"]; f == nil || len(f.Metric) != 2 {
		t.Errorf("top targets = %v, want 2 series", f)
	}

	r.clock.Advance(90 * time.Second) // past the second the queue query is cached for
	m = scrape(t, r.ts.URL+"/metrics", token)
	if age := metric(m, "agentmbx_relay_queue_oldest_item_age_seconds"); age != 90 {
		t.Errorf("oldest item age after 90 s = %v", age)
	}
}

// TestMetricsOffByDefault: without Metrics, /metrics is an unknown path on the relay's
// listener, whatever the token.
func TestMetricsOffByDefault(t *testing.T) {
	t.Parallel()
	r := newRelay(t, func(o *relayserver.Options) { o.MetricsToken = "x" })
	if code, _ := get(t, r.ts.URL+"/metrics"); code != http.StatusNotFound {
		t.Fatalf("/metrics with metrics off = %d, want 404", code)
	}
}

// failingWrites is a store that refuses writes once broken is set, as a store on a disk that
// went read-only does.
type failingWrites struct {
	relayserver.Store
	broken chan struct{}
}

var errReadOnly = errors.New("attempt to write a readonly database")

func (f *failingWrites) isBroken() bool {
	select {
	case <-f.broken:
		return true
	default:
		return false
	}
}

func (f *failingWrites) Update(ctx context.Context, fn func(relayserver.Tx) error) error {
	if f.isBroken() {
		return fmt.Errorf("%w: %w", errReadOnly, relayserver.ErrCommit)
	}
	return f.Store.Update(ctx, fn)
}

func (f *failingWrites) Heartbeat(ctx context.Context, now time.Time) error {
	if f.isBroken() {
		return errReadOnly
	}
	return f.Store.Heartbeat(ctx, now)
}

func readiness(t *testing.T, url string) (int, relayserver.Readiness) {
	t.Helper()
	code, b := get(t, url+"/readyz")
	var rd relayserver.Readiness
	if err := json.Unmarshal(b, &rd); err != nil {
		t.Fatalf("/readyz body %s: %v", b, err)
	}
	return code, rd
}

func TestHealthzAndReadyz(t *testing.T) {
	t.Parallel()
	fw := &failingWrites{broken: make(chan struct{})}
	r := &relay{t: t, dir: t.TempDir(), key: keyFor(t, 0), clock: testkit.NewClock(t0),
		wrap: func(s relayserver.Store) relayserver.Store { fw.Store = s; return fw }}
	r.start()
	t.Cleanup(r.stop)

	if code, b := get(t, r.ts.URL+"/healthz"); code != 200 || string(b) != `{"ok":true}` {
		t.Fatalf("/healthz = %d %s", code, b)
	}
	if code, rd := readiness(t, r.ts.URL); code != 200 || !rd.Ready {
		t.Fatalf("/readyz on a fresh relay = %d %+v", code, rd)
	}

	// The heartbeat loop has not written for more than three intervals.
	r.clock.Advance(3*mbx.RelayHeartbeat + time.Second)
	if code, rd := readiness(t, r.ts.URL); code != 503 || rd.Ready || rd.Checks["heartbeat"] == "ok" || rd.Checks["store"] != "ok" {
		t.Fatalf("/readyz with a stale heartbeat = %d %+v", code, rd)
	}
	if err := r.srv.Heartbeat(bg); err != nil {
		t.Fatal(err)
	}
	if code, rd := readiness(t, r.ts.URL); code != 200 || !rd.Ready {
		t.Fatalf("/readyz after a heartbeat = %d %+v", code, rd)
	}

	// The store goes read-only: not ready, and the store error stays in the log, not the body.
	close(fw.broken)
	r.clock.Advance(1100 * time.Millisecond) // the write probe runs at most once a second
	code, b := get(t, r.ts.URL+"/readyz")
	if code != 503 || strings.Contains(string(b), "readonly") {
		t.Fatalf("/readyz on a read-only store = %d %s", code, b)
	}
	var rd relayserver.Readiness
	_ = json.Unmarshal(b, &rd)
	if rd.Ready || rd.Checks["store"] != "not writable" {
		t.Fatalf("/readyz on a read-only store = %+v", rd)
	}
	if code, _ := get(t, r.ts.URL+"/healthz"); code != 200 {
		t.Fatalf("/healthz on a read-only store = %d, want 200 (the process answers)", code)
	}
}

func TestReadyzTurnsUnreadyOnShutdown(t *testing.T) {
	t.Parallel()
	r := newRelay(t, nil)
	r.srv.Shutdown()
	if code, rd := readiness(t, r.ts.URL); code != 503 || rd.Checks["serving"] != "shutting down" {
		t.Fatalf("/readyz during shutdown = %d %+v", code, rd)
	}
}

// TestServeMetricsListenerAndJSONLogs runs Serve with --metrics-listen and JSON logs at debug
// level: the metrics listener serves /metrics, /healthz and /readyz; every log line is a JSON
// object; every request's line carries the request id it was answered with; no private key
// appears anywhere in the log.
func TestServeMetricsListenerAndJSONLogs(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	relayKey := keyFor(t, 0)
	a, b := newHost(t, "alpha", 1), newHost(t, "beta", 2)
	var logs testkit.SyncBuffer
	log := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	cfg := serveConfig(dir, relayKey, t0, log)
	cfg.MetricsListen = "127.0.0.1:0"
	cfg.MetricsAddrFile = filepath.Join(dir, "metrics-addr")
	base, done := startServe(ctx, t, cfg)
	mb, err := os.ReadFile(cfg.MetricsAddrFile)
	if err != nil {
		t.Fatal(err)
	}
	mbase := "http://" + strings.TrimSpace(string(mb))
	for _, h := range []host{a, b} {
		if err := enrolAt(base, h, t0); err != nil {
			t.Fatal(err)
		}
	}
	push := mustJSON(t, mbx.PushRequest{Items: []mbx.PushItem{envItem("01KKNTQ2CN9WJ3MR4Q1P12F02T", b)}})
	if code, out, err := callURL(bg, base, &a, t0, "POST", "/v2/relay/items", push); err != nil || code != 200 {
		t.Fatalf("push = %d %s %v", code, out, err)
	}
	// A refused request: its id, sent by a proxy, is in its answer and its log lines.
	req, _ := http.NewRequest("GET", base+"/v2/relay/items?after=0", nil)
	req.Header.Set(relayserver.HeaderRequestID, "proxy-id-42")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 || resp.Header.Get(relayserver.HeaderRequestID) != "proxy-id-42" {
		t.Fatalf("unsigned pull = %d, id %q", resp.StatusCode, resp.Header.Get(relayserver.HeaderRequestID))
	}
	m := scrape(t, mbase+"/metrics", "")
	if got := metric(m, "agentmbx_relay_items_total", "result=accepted"); got != 1 {
		t.Fatalf("accepted items on the metrics listener = %v, want 1", got)
	}
	if code, _ := get(t, mbase+"/healthz"); code != 200 {
		t.Fatalf("metrics listener /healthz = %d", code)
	}
	if code, rd := readiness(t, mbase); code != 200 || !rd.Ready {
		t.Fatalf("metrics listener /readyz = %d %+v", code, rd)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Serve: %v", err)
	}

	out := logs.String()
	var ids []string
	refused := false
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("a log line is not JSON: %q: %v", line, err)
		}
		if rec["msg"] == "relay request" {
			id, _ := rec["req"].(string)
			if id == "" {
				t.Fatalf("a request line has no request id: %s", line)
			}
			ids = append(ids, id)
		}
		if rec["msg"] == "relay request refused" && rec["req"] == "proxy-id-42" {
			refused = true
		}
	}
	if len(ids) < 6 || !refused {
		t.Fatalf("request lines %v (refused line with the proxy's id: %v):\n%s", ids, refused, out)
	}
	sort.Strings(ids)
	for i := 1; i < len(ids); i++ {
		if ids[i] == ids[i-1] {
			t.Fatalf("request id %s used twice", ids[i])
		}
	}
	for name, secret := range map[string]string{"relay": relayKey.Seed(), "alpha": a.key.Seed(), "beta": b.key.Seed()} {
		if strings.Contains(out, secret) {
			t.Fatalf("the log carries the %s private key:\n%s", name, out)
		}
	}
}

// TestMetricsCountV1 reads the v1 endpoints' traffic back from the metrics: envelopes stored and
// refused, the pull and the ack.
func TestMetricsCountV1(t *testing.T) {
	t.Parallel()
	const token = "tok"
	r, a, b, _ := setup(t, func(o *relayserver.Options) { o.Metrics, o.MetricsToken = relayserver.NewMetrics(0), token })
	if code, res := r.v1Push(a, v1Env("01JQV1000000000000000000A1", "bob@beta")); code != 200 || res.Stored != 1 {
		t.Fatalf("v1 push = %d %+v", code, res)
	}
	if code, res := r.v1Push(a, v1Env("01JQV1000000000000000000A2", "zed@nowhere")); res.Stored != 0 || res.Error == nil {
		t.Fatalf("v1 push to nobody = %d %+v, want a refusal", code, res)
	}
	p := r.v1Pull(b, 0)
	if code, out := r.callV1(b, "POST", "/v1/relay/ack", []byte(fmt.Sprintf(`{"cursor":%d}`, *p.Cursor))); code != 200 {
		t.Fatalf("v1 ack = %d %s", code, out)
	}
	m := scrape(t, r.ts.URL+"/metrics", token)
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"agentmbx_relay_v1_envelopes_total", []string{"result=stored"}, 1},
		{"agentmbx_relay_v1_envelopes_total", []string{"result=refused"}, 1},
		{"agentmbx_relay_pulled_items_total", nil, 1},
		{"agentmbx_relay_acks_total", nil, 1},
		{"agentmbx_relay_acked_items_total", nil, 1},
		{"agentmbx_relay_requests_total", []string{"route=POST /v1/relay/messages", "status=200"}, 1},
		{"agentmbx_relay_queue_items", nil, 0},
	} {
		if got := metric(m, c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
}
