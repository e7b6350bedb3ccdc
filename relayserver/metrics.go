package relayserver

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/agentmbx/agentmbx/internal/logkey"
	"github.com/agentmbx/agentmbx/mbx"
)

// QueueStatter is implemented by a Store that can report its queues when metrics are scraped,
// at a cost bounded by the number of targets, never by the number of items.
type QueueStatter interface {
	// QueueStats returns the totals of all queues and the topN deepest targets.
	QueueStats(ctx context.Context, topN int) (QueueStats, error)
}

// QueueStats is a snapshot of the relay's queues.
type QueueStats struct {
	// Items and Bytes are what all queues hold; Targets how many targets hold anything.
	Items, Bytes, Targets int64
	// OldestAcceptedAt is when the oldest queued item was accepted; zero when nothing is queued.
	OldestAcceptedAt time.Time
	// Top are the deepest queues, deepest first.
	Top []TargetDepth
	// LiveEnrolments counts enrolments that are not revoked.
	LiveEnrolments int64
	// StoreBytes is the store's size on disk (or in its database); 0 when unknown.
	StoreBytes int64
}

// TargetDepth is one target's queue.
type TargetDepth struct {
	Target       string
	Items, Bytes int64
}

// CommitReporter is implemented by a Store that tells, after each committed write transaction,
// how many units it carried and how long it took from its start to the end of its commit.
type CommitReporter interface {
	// ReportCommits makes the store call fn after every commit (nil stops it). fn runs on the
	// store's writer and must be cheap.
	ReportCommits(fn func(units int, took time.Duration))
}

// DefaultTopTargets is how many of the deepest queues the metrics name.
const DefaultTopTargets = 5

// Metrics are the relay's Prometheus metrics, all named agentmbx_relay_*. Make them with
// NewMetrics, pass them as Options.Metrics and serve Handler. Counters are bumped by the request
// handlers (one nil check when metrics are off); the queue gauges are read from the Store when
// scraped, at most once a second.
type Metrics struct {
	reg  *prometheus.Registry
	topN int

	items          *prometheus.CounterVec
	v1Envelopes    *prometheus.CounterVec
	dedupConflicts prometheus.Counter
	commitSeconds  prometheus.Histogram
	commitUnits    prometheus.Histogram
	pulls          *prometheus.CounterVec
	pulledItems    prometheus.Counter
	parks          prometheus.Counter
	acks           prometheus.Counter
	ackedItems     prometheus.Counter
	swept          *prometheus.CounterVec
	notices        prometheus.Counter
	noticesSkipped *prometheus.CounterVec
	dedupPruned    prometheus.Counter
	enrolments     *prometheus.CounterVec
	refusals       *prometheus.CounterVec
	requests       *prometheus.CounterVec
	requestSeconds *prometheus.HistogramVec
	backups        *prometheus.CounterVec
	backupLast     prometheus.Gauge

	attachOnce sync.Once
}

// NewMetrics makes the relay's metrics in a registry of their own, with the Go runtime and
// process collectors. topN is how many of the deepest queues they name (0: DefaultTopTargets).
func NewMetrics(topN int) *Metrics {
	if topN <= 0 {
		topN = DefaultTopTargets
	}
	m := &Metrics{reg: prometheus.NewRegistry(), topN: topN}
	m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.items = m.counterVec("items_total", "Pushed items by result: accepted, duplicate, or rejected with its code.", "result", "code")
	m.v1Envelopes = m.counterVec("v1_envelopes_total", "Envelopes of v1 pushes (POST /v1/relay/messages): stored (a repeat of a stored id counts), or refused (the first refusal of a push; the rest of its batch is not looked at).", "result")
	m.dedupConflicts = m.counter("dedup_conflicts_total", "Pushed items refused because their id was stored with other bytes (rejected:conflict).")
	m.commitSeconds = m.histogram("commit_seconds", "Duration of each committed store write transaction, fsync included.",
		prometheus.ExponentialBuckets(0.0005, 2, 14))
	m.commitUnits = m.histogram("commit_units", "Units (requests' atomic writes) carried by each committed transaction (group commit).",
		prometheus.ExponentialBuckets(1, 2, 10))
	m.pulls = m.counterVec("pulls_total", "Pulls answered 200, by whether the page held items.", "result")
	m.pulledItems = m.counter("pulled_items_total", "Items handed out in pull pages (a re-pull counts again).")
	m.parks = m.counter("long_polls_parked_total", "Times a pull found nothing and was parked to wait for an item.")
	m.acks = m.counter("acks_total", "Acks committed.")
	m.ackedItems = m.counter("acked_items_total", "Items deleted by acks.")
	m.swept = m.counterVec("swept_items_total", "Items deleted by the retention sweep, by kind.", "kind")
	m.notices = m.counter("expiry_notices_total", "Signed expiry notices queued for senders of expired envelopes.")
	m.noticesSkipped = m.counterVec("expiry_notices_skipped_total", "Expiry notices not queued, by reason (not_enrolled, over_cap).", "reason")
	m.dedupPruned = m.counter("dedup_pruned_total", "Dedup rows pruned past the dedup horizon.")
	m.enrolments = m.counterVec("enrolments_total", "Enrolments committed, by authority.", "authority")
	m.refusals = m.counterVec("enrolment_refusals_total", "Enrol and challenge calls refused, by HTTP status (400 malformed or bad signature, 403 denied or revoked, 409 name taken, 429 rate limited, 503 relay full).", "status")
	m.requests = m.counterVec("requests_total", "HTTP requests answered, by route and status.", "route", "status")
	m.requestSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "agentmbx_relay_request_seconds",
		Help: "Duration of HTTP requests by route (long polls included).", Buckets: prometheus.ExponentialBuckets(0.001, 4, 10)}, []string{"route"})
	m.reg.MustRegister(m.requestSeconds)
	m.backups = m.counterVec("backups_total", "Scheduled backups (relay serve --backup-dir) by result: ok or failed.", "result")
	m.backupLast = prometheus.NewGauge(prometheus.GaugeOpts{Name: "agentmbx_relay_backup_last_success_timestamp_seconds",
		Help: "Unix time of the last successful scheduled backup (0 when none is known)."})
	m.reg.MustRegister(m.backupLast)
	return m
}

// backupSucceeded records when the last successful scheduled backup was taken.
func (m *Metrics) backupSucceeded(at time.Time) { m.backupLast.Set(float64(at.UnixMilli()) / 1000) }

// backupResult counts one scheduled backup by its result.
func (m *Metrics) backupResult(ok bool) {
	okC, failC := m.backups.WithLabelValues("ok"), m.backups.WithLabelValues("failed") // both series from the first on
	if ok {
		okC.Inc()
	} else {
		failC.Inc()
	}
}

func (m *Metrics) counter(name, help string) prometheus.Counter {
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "agentmbx_relay_" + name, Help: help})
	m.reg.MustRegister(c)
	return c
}

func (m *Metrics) counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "agentmbx_relay_" + name, Help: help}, labels)
	m.reg.MustRegister(c)
	return c
}

func (m *Metrics) histogram(name, help string, buckets []float64) prometheus.Histogram {
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "agentmbx_relay_" + name, Help: help, Buckets: buckets})
	m.reg.MustRegister(h)
	return h
}

// Handler serves the metrics in the Prometheus text format. A failing store query leaves its
// gauges out of the scrape (and sets agentmbx_relay_store_stats_ok to 0) instead of failing it.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// Registry is where the metrics live, for callers that add their own.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// attach registers the gauges read from s when scraped. A Metrics serves one Server.
func (m *Metrics) attach(s *Server) error {
	err := errors.New("relayserver: these metrics already serve another server")
	m.attachOnce.Do(func() {
		err = m.reg.Register(&scrapeCollector{s: s, topN: m.topN})
		if err == nil {
			err = m.reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "agentmbx_relay_long_polls_parked",
				Help: "Pulls parked right now, waiting for an item."}, func() float64 { return float64(s.polls.len()) }))
		}
		if cr, ok := s.store.(CommitReporter); ok && err == nil {
			cr.ReportCommits(func(units int, took time.Duration) {
				m.commitSeconds.Observe(took.Seconds())
				m.commitUnits.Observe(float64(units))
			})
		}
	})
	return err
}

// The hooks below are what the handlers call; each is a no-op on nil Metrics.

// pushed counts the results of one push.
func (m *Metrics) pushed(work []*pushWork) {
	if m == nil {
		return
	}
	for _, it := range work {
		switch {
		case it.code == RejectConflict:
			m.dedupConflicts.Inc()
			m.items.WithLabelValues("rejected", it.code).Inc()
		case it.code != "":
			m.items.WithLabelValues("rejected", it.code).Inc()
		case it.dup:
			m.items.WithLabelValues(mbx.StatusDuplicate, "").Inc()
		default:
			m.items.WithLabelValues(mbx.StatusAccepted, "").Inc()
		}
	}
}

// v1Pushed counts a v1 push that stored n envelopes and, when refused, stopped at one refusal.
func (m *Metrics) v1Pushed(n int, refused bool) {
	if m == nil {
		return
	}
	m.v1Envelopes.WithLabelValues("stored").Add(float64(n))
	if refused {
		m.v1Envelopes.WithLabelValues("refused").Inc()
	}
}

// pulled counts a pull answered with n items.
func (m *Metrics) pulled(n int) {
	if m == nil {
		return
	}
	if n == 0 {
		m.pulls.WithLabelValues("empty").Inc()
		return
	}
	m.pulls.WithLabelValues("items").Inc()
	m.pulledItems.Add(float64(n))
}

// parked counts a pull that waits.
func (m *Metrics) parked() {
	if m != nil {
		m.parks.Inc()
	}
}

// acked counts a committed ack that deleted n items.
func (m *Metrics) acked(n int64) {
	if m != nil {
		m.acks.Inc()
		m.ackedItems.Add(float64(n))
	}
}

// swept counts one committed sweep.
func (m *Metrics) sweptReport(rep mbx.SweepReport) {
	if m == nil {
		return
	}
	m.swept.WithLabelValues(string(KindEnvelope)).Add(float64(rep.Expired.Envelope))
	m.swept.WithLabelValues(string(KindReceipt)).Add(float64(rep.Expired.Receipt))
	m.swept.WithLabelValues(string(KindExpired)).Add(float64(rep.Expired.Expired))
	m.notices.Add(float64(rep.Notices))
	m.noticesSkipped.WithLabelValues("not_enrolled").Add(float64(rep.NoticesSkipped.NotEnrolled))
	m.noticesSkipped.WithLabelValues("over_cap").Add(float64(rep.NoticesSkipped.OverCap))
	m.dedupPruned.Add(float64(rep.DedupPruned))
}

// request counts one answered request; route is the mux pattern that served it.
func (m *Metrics) request(s *Server, route string, status int, took time.Duration) {
	if m == nil {
		return
	}
	code := strconv.Itoa(status)
	m.requests.WithLabelValues(route, code).Inc()
	m.requestSeconds.WithLabelValues(route).Observe(took.Seconds())
	switch route {
	case "POST /v1/relay/enrol", "POST /v2/relay/enrol":
		if status == http.StatusOK {
			m.enrolments.WithLabelValues(s.opt.Authority.Name()).Inc()
		} else {
			m.refusals.WithLabelValues(code).Inc()
		}
	case "POST /v1/relay/challenge", "POST /v2/relay/challenge":
		if status != http.StatusOK {
			m.refusals.WithLabelValues(code).Inc()
		}
	}
}

// scrapeCollector reads the queue gauges, the store size and the epoch when scraped. Its store
// queries run at most once a second (a burst of scrapes shares one result) with a deadline.
type scrapeCollector struct {
	s    *Server
	topN int

	mu   sync.Mutex
	at   time.Time
	last QueueStats
	err  error
}

var (
	descItems   = prometheus.NewDesc("agentmbx_relay_queue_items", "Items queued over all targets (accepted, not yet acked or expired).", nil, nil)
	descBytes   = prometheus.NewDesc("agentmbx_relay_queue_bytes", "Wire bytes queued over all targets.", nil, nil)
	descTargets = prometheus.NewDesc("agentmbx_relay_queue_targets", "Targets with at least one queued item.", nil, nil)
	descOldest  = prometheus.NewDesc("agentmbx_relay_queue_oldest_item_age_seconds", "Age of the oldest queued item (0 when nothing is queued).", nil, nil)
	descTopN    = prometheus.NewDesc("agentmbx_relay_queue_top_target_items", "Items queued for the deepest targets: rank 1 is the deepest; target is the host key's fingerprint.", []string{"rank", "target"}, nil)
	descTopB    = prometheus.NewDesc("agentmbx_relay_queue_top_target_bytes", "Wire bytes queued for the deepest targets (same ranks as queue_top_target_items).", []string{"rank", "target"}, nil)
	descEnrol   = prometheus.NewDesc("agentmbx_relay_enrolments_live", "Enrolments that are not revoked.", nil, nil)
	descSize    = prometheus.NewDesc("agentmbx_relay_store_size_bytes", "Size of the store on disk (database and WAL).", nil, nil)
	descStatsOK = prometheus.NewDesc("agentmbx_relay_store_stats_ok", "1 when the store answered the scrape's queue query, else 0 (and the queue gauges are left out).", nil, nil)
	descEpoch   = prometheus.NewDesc("agentmbx_relay_epoch_info", "The store epoch this relay answers with, and the relay key's fingerprint.", []string{"epoch", "relay_key"}, nil)
)

// Describe implements prometheus.Collector.
func (c *scrapeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descItems, descBytes, descTargets, descOldest, descTopN, descTopB,
		descEnrol, descSize, descStatsOK, descEpoch} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *scrapeCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(descEpoch, prometheus.GaugeValue, 1, c.s.epoch, c.s.key.Fingerprint())
	qs, err := c.stats()
	if err != nil {
		ch <- prometheus.MustNewConstMetric(descStatsOK, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(descStatsOK, prometheus.GaugeValue, 1)
	gauge := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v), labels...)
	}
	gauge(descItems, qs.Items)
	gauge(descBytes, qs.Bytes)
	gauge(descTargets, qs.Targets)
	gauge(descEnrol, qs.LiveEnrolments)
	if qs.StoreBytes > 0 {
		gauge(descSize, qs.StoreBytes)
	}
	age := 0.0
	if !qs.OldestAcceptedAt.IsZero() {
		age = max(c.s.opt.Clock().Sub(qs.OldestAcceptedAt).Seconds(), 0)
	}
	ch <- prometheus.MustNewConstMetric(descOldest, prometheus.GaugeValue, age)
	for i, d := range qs.Top {
		rank, fp := strconv.Itoa(i+1), mbx.Fingerprint(d.Target)
		gauge(descTopN, d.Items, rank, fp)
		gauge(descTopB, d.Bytes, rank, fp)
	}
}

// stats returns the store's queue stats, queried at most once a second (of Options.Clock).
func (c *scrapeCollector) stats() (QueueStats, error) {
	qsr, ok := c.s.store.(QueueStatter)
	if !ok {
		return QueueStats{}, errors.New("the store does not report its queues")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.s.opt.Clock()
	if !c.at.IsZero() && now.Sub(c.at) < time.Second {
		return c.last, c.err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c.last, c.err = qsr.QueueStats(ctx, c.topN)
	c.at = now
	if c.err != nil {
		c.s.log.Warn("metrics: queue stats failed", logkey.Err, c.err)
	}
	return c.last, c.err
}
