package host

// What operators watch: counters of what the daemon did, a snapshot of its state for metrics,
// and health and readiness (also served on the control socket).

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/bbolt"

	"github.com/agentmbx/agentmbx/internal/logkey"
	"github.com/agentmbx/agentmbx/outbox"
)

// opsCounters count, since the host was opened, the outcomes recorded per transport and the
// delivery receipts applied. They are bumped after the transaction holding them committed.
type opsCounters struct {
	outcomes [3][5]atomic.Int64 // [transport][outcome kind]
	receipts atomic.Int64

	probeMu  sync.Mutex
	probeAt  time.Time
	probeErr error
}

// OutcomeCount is how many attempts of one transport had one outcome.
type OutcomeCount struct {
	Transport string // lan or relay
	Outcome   string // delivered, relay-accepted, rejected, failed
	N         int64
}

// countOutcome counts one recorded outcome (call it on commit).
func (c *opsCounters) countOutcome(tr outbox.Transport, k outbox.OutcomeKind) {
	if tr <= outbox.TransportRelay && k >= outbox.OutcomeDelivered && k <= outbox.OutcomeRelayAccepted {
		c.outcomes[tr][k].Add(1)
	}
}

// OpsSnapshot is the daemon's state for metrics, read at scrape time.
type OpsSnapshot struct {
	// Outbox counts rows by state name (every state, zeros included).
	Outbox map[string]int
	// OldestPending is when the oldest pending row was created (zero when none).
	OldestPending time.Time
	// Outcomes are the recorded attempt outcomes by transport since the host was opened.
	Outcomes []OutcomeCount
	// ReceiptsApplied counts delivery receipts applied since the host was opened.
	ReceiptsApplied int64
	// Quarantined counts the relay items held in quarantine.
	Quarantined int
	// RelayLink is the relay link's state: none (no relay pinned), stopped (the relay served
	// another key), not-enrolled, failing (an operation's last try failed) or ok.
	RelayLink string
	// RelayProblems names the relay operations whose last try failed.
	RelayProblems []string
}

// RelayLinkStates are the values of OpsSnapshot.RelayLink.
var RelayLinkStates = []string{"none", "stopped", "not-enrolled", "failing", "ok"}

// OpsSnapshot reads the daemon's state for metrics: the outbox (every row: O(rows), without
// wire bytes), the quarantine and relay status, and the counters.
func (h *Host) OpsSnapshot(ctx context.Context) (OpsSnapshot, error) {
	snap := OpsSnapshot{Outbox: map[string]int{}}
	for s := outbox.StatePending; s <= outbox.StateDone; s++ {
		snap.Outbox[s.String()] = 0
	}
	rows, err := h.ob.List(ctx, outbox.Filter{})
	if err != nil {
		return snap, err
	}
	for _, r := range rows {
		snap.Outbox[r.State.String()]++
		if r.State == outbox.StatePending && (snap.OldestPending.IsZero() || r.CreatedAt.Before(snap.OldestPending)) {
			snap.OldestPending = r.CreatedAt
		}
	}
	for _, tr := range []outbox.Transport{outbox.TransportLAN, outbox.TransportRelay} {
		for k := outbox.OutcomeDelivered; k <= outbox.OutcomeRelayAccepted; k++ {
			if tr == outbox.TransportLAN && k == outbox.OutcomeRelayAccepted {
				continue
			}
			snap.Outcomes = append(snap.Outcomes, OutcomeCount{Transport: tr.String(), Outcome: k.String(),
				N: h.ops.outcomes[tr][k].Load()})
		}
	}
	snap.ReceiptsApplied = h.ops.receipts.Load()
	rs, err := h.RelayStatus(ctx)
	if err != nil {
		return snap, err
	}
	snap.Quarantined = rs.Quarantined
	for _, p := range rs.Problems {
		snap.RelayProblems = append(snap.RelayProblems, p.Op)
	}
	switch {
	case !rs.Configured:
		snap.RelayLink = "none"
	case rs.Stopped:
		snap.RelayLink = "stopped"
	case !rs.Enrolled:
		snap.RelayLink = "not-enrolled"
	case len(rs.Problems) > 0:
		snap.RelayLink = "failing"
	default:
		snap.RelayLink = "ok"
	}
	return snap, nil
}

// Readiness is the answer of GET /readyz.
type Readiness struct {
	Ready bool `json:"ready"`
	// Checks names each check with "ok" or what is wrong.
	Checks map[string]string `json:"checks"`
}

// Ready runs the readiness checks: the daemon serves this host, and the store takes a write now
// (at most one probe write a second, however often it is asked).
func (h *Host) Ready(ctx context.Context) Readiness {
	rd := Readiness{Ready: true, Checks: map[string]string{"daemon": "ok", "store": "ok"}}
	h.mu.Lock()
	serving := h.daemon && !h.closed
	h.mu.Unlock()
	if !serving {
		rd.Ready, rd.Checks["daemon"] = false, "not serving"
	}
	if err := h.probeWrite(); err != nil {
		rd.Ready, rd.Checks["store"] = false, "not writable"
	}
	return rd
}

// probeWrite writes the time into the meta bucket to prove the store takes writes.
func (h *Host) probeWrite() error {
	c := &h.ops
	c.probeMu.Lock()
	defer c.probeMu.Unlock()
	if !c.probeAt.IsZero() && time.Since(c.probeAt) < time.Second {
		return c.probeErr
	}
	c.probeErr = h.db.Update(func(tx *bbolt.Tx) error {
		return tx.Bucket(bucketMeta).Put([]byte("ready_probe"), []byte(strconv.FormatInt(h.clock().UnixMilli(), 10)))
	})
	c.probeAt = time.Now()
	if c.probeErr != nil {
		h.log.Warn("readiness: the store refused a write", logkey.Err, c.probeErr)
	}
	return c.probeErr
}

// HealthHandler serves GET /healthz (the process answers) and GET /readyz (Ready: 200 or 503)
// and passes every other request to next. The control socket and `daemon --metrics-listen`
// serve it.
func (h *Host) HealthHandler(next http.Handler) http.Handler {
	m := http.NewServeMux()
	m.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeOpsJSON(w, http.StatusOK, map[string]bool{"ok": true})
	})
	m.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		rd := h.Ready(r.Context())
		status := http.StatusOK
		if !rd.Ready {
			status = http.StatusServiceUnavailable
		}
		writeOpsJSON(w, status, rd)
	})
	if next != nil {
		m.Handle("/", next)
	}
	return m
}

func writeOpsJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
