package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/agentmbx/agentmbx/host"
	"github.com/agentmbx/agentmbx/host/ops"
	"github.com/agentmbx/agentmbx/internal/fsutil"
	"github.com/agentmbx/agentmbx/internal/logkey"
)

// daemonMetrics is `daemon --metrics-listen`: a private listener with /metrics (agentmbx_daemon_*),
// /healthz and /readyz, started once the daemon serves and stopped when it returns.
type daemonMetrics struct {
	listen, addrFile string
	log              *slog.Logger

	mu  sync.Mutex
	srv *http.Server
	err error
	// cur is the daemon's open host: a key rotation opens the store again, and the daemon's
	// Ready then hands over the new host.
	cur atomic.Pointer[host.Host]
}

// start serves the metrics of h; called from the daemon's Ready (again after a key rotation:
// the listener stays, the host it reads changes).
func (d *daemonMetrics) start(h *host.Host) {
	if d.listen == "" {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.cur.Store(h)
	if d.srv != nil {
		return
	}
	ln, err := net.Listen("tcp", d.listen)
	if err != nil {
		d.err = fmt.Errorf("daemon: metrics listener: %w", err)
		d.log.Error("metrics listener", logkey.Err, err)
		return
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		&hostCollector{h: d.cur.Load})
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { d.cur.Load().Ops().Handler(mux).ServeHTTP(w, r) })
	d.srv = &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout: time.Minute, WriteTimeout: time.Minute}
	go func() { _ = d.srv.Serve(ln) }()
	addr := ln.Addr().String()
	d.log.Info("daemon metrics serving", logkey.Addr, addr)
	if d.addrFile != "" {
		if err := fsutil.WriteFileAtomic(d.addrFile, []byte(addr+"\n"), 0o600); err != nil {
			d.log.Error("metrics addr file", logkey.Err, err)
		}
	}
}

// stop closes the listener and reports a failure to start it.
func (d *daemonMetrics) stop() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := d.srv.Shutdown(ctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
			_ = d.srv.Close()
		}
	}
	return d.err
}

// hostCollector reads the daemon's state when scraped, at most once a second.
type hostCollector struct {
	h func() *host.Host // the daemon's open host

	mu   sync.Mutex
	at   time.Time
	last ops.Snapshot
	err  error
}

var (
	descOutbox     = prometheus.NewDesc("agentmbx_daemon_outbox_rows", "Outbox rows by state (one per message and target host).", []string{"state"}, nil)
	descOldest     = prometheus.NewDesc("agentmbx_daemon_outbox_oldest_pending_age_seconds", "Age of the oldest pending outbox row (0 when none).", nil, nil)
	descDeliveries = prometheus.NewDesc("agentmbx_daemon_deliveries_total", "Send attempts recorded since the daemon started, by transport and outcome (delivered, relay-accepted, rejected, failed).", []string{"transport", "outcome"}, nil)
	descReceipts   = prometheus.NewDesc("agentmbx_daemon_receipts_applied_total", "Delivery receipts applied since the daemon started (LAN and relay).", nil, nil)
	descQuarantine = prometheus.NewDesc("agentmbx_daemon_quarantine_items", "Relay items held in quarantine.", nil, nil)
	descRelayLink  = prometheus.NewDesc("agentmbx_daemon_relay_link", "1 for the relay link's current state: none, stopped, not-enrolled, failing, ok.", []string{"state"}, nil)
	descRelayProb  = prometheus.NewDesc("agentmbx_daemon_relay_problem", "1 for each relay operation whose last try failed.", []string{"op"}, nil)
	descReach      = prometheus.NewDesc("agentmbx_daemon_reach", "1 for each transport target's current state (target: relay or lan:HOST; state: up, quiet, down, unknown).", []string{"target", "state"}, nil)
	descStateOK    = prometheus.NewDesc("agentmbx_daemon_state_ok", "1 when the host's state was read for this scrape, else 0 (and its gauges are left out).", nil, nil)
)

// Describe implements prometheus.Collector.
func (c *hostCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descOutbox, descOldest, descDeliveries, descReceipts, descQuarantine,
		descRelayLink, descRelayProb, descReach, descStateOK} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *hostCollector) Collect(ch chan<- prometheus.Metric) {
	s, err := c.snapshot()
	if err != nil {
		ch <- prometheus.MustNewConstMetric(descStateOK, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(descStateOK, prometheus.GaugeValue, 1)
	for state, n := range s.Outbox {
		ch <- prometheus.MustNewConstMetric(descOutbox, prometheus.GaugeValue, float64(n), state)
	}
	age := 0.0
	if !s.OldestPending.IsZero() {
		age = max(time.Since(s.OldestPending).Seconds(), 0)
	}
	ch <- prometheus.MustNewConstMetric(descOldest, prometheus.GaugeValue, age)
	for _, o := range s.Outcomes {
		ch <- prometheus.MustNewConstMetric(descDeliveries, prometheus.CounterValue, float64(o.N), o.Transport, o.Outcome)
	}
	ch <- prometheus.MustNewConstMetric(descReceipts, prometheus.CounterValue, float64(s.ReceiptsApplied))
	ch <- prometheus.MustNewConstMetric(descQuarantine, prometheus.GaugeValue, float64(s.Quarantined))
	for _, st := range ops.RelayLinkStates {
		v := 0.0
		if st == s.RelayLink {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(descRelayLink, prometheus.GaugeValue, v, st)
	}
	for _, op := range s.RelayProblems {
		ch <- prometheus.MustNewConstMetric(descRelayProb, prometheus.GaugeValue, 1, op)
	}
	for _, r := range s.Reach {
		for _, st := range []string{"up", "quiet", "down", "unknown"} {
			v := 0.0
			if st == r.State {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(descReach, prometheus.GaugeValue, v, r.Target, st)
		}
	}
}

func (c *hostCollector) snapshot() (ops.Snapshot, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.at.IsZero() && time.Since(c.at) < time.Second {
		return c.last, c.err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c.last, c.err = c.h().Ops().Snapshot(ctx)
	c.at = time.Now()
	return c.last, c.err
}
