package relayserver_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/relayserver"
	"github.com/agentmbx/agentmbx/relayserver/sqlitestore"
)

const day = 24 * time.Hour

func (r *relay) sweep() mbx.SweepReport {
	r.t.Helper()
	rep, err := r.srv.Sweep(bg)
	if err != nil {
		r.t.Fatalf("sweep: %v", err)
	}
	return rep
}

func (r *relay) ack(h host, through int64) {
	r.t.Helper()
	code, body := r.call(&h, "POST", "/v2/relay/ack", mustJSON(r.t, mbx.AckRequest{Epoch: r.srv.Epoch(), Through: through}))
	if code != 200 {
		r.t.Fatalf("ack: %d %s", code, body)
	}
}

func expiredCount(rep mbx.SweepReport) int64 {
	return rep.Expired.Envelope + rep.Expired.Receipt + rep.Expired.Expired
}

func TestSweepExpiresEnvelopeAndNotifiesSender(t *testing.T) {
	t.Parallel()
	r, a, b, _ := setup(t, func(o *relayserver.Options) {
		o.Limits = mbx.DefaultLimits()
		o.Limits.MaxSenderItems = 1 // so the freed share shows
	})
	ret := 14 * day
	id := "01KKNTQ2CN9WJ3MR4Q1P12F02T"
	accepted := r.clock.Now()
	if st := statuses(r.push(a, envItem(id, b))); st[0] != "accepted" {
		t.Fatalf("push = %v", st)
	}
	if st := statuses(r.push(a, envItem("01KKNTQ2CN9WJ3MR4Q1P12F0XX", b))); st[0] != "rejected:quota:sender_items" {
		t.Fatalf("second push within the share = %v, want rejected:quota:sender_items", st)
	}

	r.clock.Advance(ret - time.Millisecond)
	if rep := r.sweep(); expiredCount(rep) != 0 || rep.Notices != 0 {
		t.Fatalf("sweep before expiry = %+v, want nothing done", rep)
	}
	if got := ids(r.pull(b, 0)); len(got) != 1 {
		t.Fatalf("beta's queue before expiry = %v, want the item", got)
	}

	r.clock.Advance(time.Millisecond)
	rep := r.sweep()
	if rep.Expired.Envelope != 1 || rep.Notices != 1 || rep.FreedBytes != int64(len(envWire(id, ""))) ||
		rep.Type != "relay-sweep" || rep.RetentionDays != 14 {
		t.Fatalf("sweep at expiry = %+v, want 1 envelope expired, 1 notice, %d bytes freed", rep, len(envWire(id, "")))
	}
	if got := ids(r.pull(b, 0)); len(got) != 0 {
		t.Fatalf("beta's queue after expiry = %v, want empty", got)
	}

	// Alpha pulls the notice, signed by the relay key it pinned.
	p := r.pull(a, 0)
	if len(p.Items) != 1 {
		t.Fatalf("alpha's queue = %+v, want one notice", p)
	}
	it := p.Items[0]
	if it.Kind != "expired" || it.SenderPubkey != r.key.PublicKey() || it.ItemID != mbx.ExpiryNoticeItemID(id, b.pub()) {
		t.Fatalf("notice item = %+v, want kind expired from the relay key with id %s", it, mbx.ExpiryNoticeItemID(id, b.pub()))
	}
	wire, err := mbx.DecodeB64Lenient(it.WireB64)
	if err != nil {
		t.Fatal(err)
	}
	n, err := mbx.CheckExpiryNotice(wire, it.SenderPubkey, r.key.PublicKey())
	if err != nil {
		t.Fatalf("CheckExpiryNotice: %v", err)
	}
	if n.ItemID != id || n.TargetPubkey != b.pub() || !n.AcceptedTime().Equal(accepted) || !n.ExpiredTime().Equal(r.clock.Now()) {
		t.Fatalf("notice = %+v, want item %s for beta accepted %v expired %v", n, id, accepted, r.clock.Now())
	}
	other := keyFor(t, 99).PublicKey()
	if _, err := mbx.CheckExpiryNotice(wire, it.SenderPubkey, other); !errors.Is(err, mbx.ErrBadExpiryNotice) {
		t.Fatalf("notice checked against another relay key: err = %v, want ErrBadExpiryNotice", err)
	}

	// A late retry is a duplicate with the original seq and is not queued again.
	if st := statuses(r.push(a, envItem(id, b))); st[0] != "duplicate" {
		t.Fatalf("late retry = %v, want duplicate", st)
	}
	if got := ids(r.pull(b, 0)); len(got) != 0 {
		t.Fatalf("beta's queue after the late retry = %v, want empty", got)
	}
	// The sender's share is free again; the notice in alpha's queue is not charged to anyone's share.
	if st := statuses(r.push(a, envItem("01KKNTQ2CN9WJ3MR4Q1P12F0XX", b))); st[0] != "accepted" {
		t.Fatalf("push after expiry = %v, want accepted (share freed)", st)
	}
	if st := statuses(r.push(b, envItem("01KKNTQ2CN9WJ3MR4Q1P12F0YY", a))); st[0] != "accepted" {
		t.Fatalf("push to alpha beside the notice = %v, want accepted", st)
	}
	// A second sweep finds nothing more.
	if rep := r.sweep(); expiredCount(rep) != 0 || rep.Notices != 0 {
		t.Fatalf("second sweep = %+v, want nothing", rep)
	}
}

func TestSweepDropsReceiptsAndNoticesSilently(t *testing.T) {
	t.Parallel()
	r, a, b, _ := setup(t, nil)
	item := readReceiptItem(t, r, a, b)
	if st := r.push(a, item).Results[0].Status; st != "accepted" {
		t.Fatalf("receipt = %s", st)
	}
	r.push(b, envItem("01KKNTQ2CN9WJ3MR4Q1P12F0B1", a))
	r.clock.Advance(14 * day)
	rep := r.sweep()
	if rep.Expired.Receipt != 1 || rep.Expired.Envelope != 1 || rep.Notices != 1 {
		t.Fatalf("sweep = %+v, want a receipt dropped and one envelope noticed", rep)
	}
	if p := r.pull(a, 0); len(p.Items) != 0 {
		t.Fatalf("alpha's queue = %v, want nothing (receipts expire without notice)", ids(p))
	}
	if st := r.push(a, item).Results[0].Status; st != "duplicate" {
		t.Fatalf("late receipt retry = %s, want duplicate", st)
	}
	// Beta never pulls its notice: it expires in turn, silently.
	if got := ids(r.pull(b, 0)); len(got) != 1 {
		t.Fatalf("beta's queue = %v, want the notice", got)
	}
	r.clock.Advance(14 * day)
	rep = r.sweep()
	if rep.Expired.Expired != 1 || rep.Notices != 0 || expiredCount(rep) != 1 {
		t.Fatalf("sweep of the notice = %+v, want it dropped without a notice", rep)
	}
	if got := ids(r.pull(b, 0)); len(got) != 0 {
		t.Fatalf("beta's queue = %v, want empty", got)
	}
}

func TestSweepPrunesDedupAfterTheHorizon(t *testing.T) {
	t.Parallel()
	r, a, b, _ := setup(t, nil)
	expiring, acked := "01KKNTQ2CN9WJ3MR4Q1P12F0E1", "01KKNTQ2CN9WJ3MR4Q1P12F0A1"
	r.push(a, envItem(expiring, b), envItem(acked, b))
	p := r.pull(b, 0)
	// Beta acknowledges only the second item.
	r.ack(b, p.Items[1].Seq)
	if got := ids(r.pull(b, 0)); len(got) != 0 {
		t.Fatalf("queue after ack = %v", got)
	}
	r.clock.Advance(14 * day)
	if rep := r.sweep(); rep.DedupPruned != 0 {
		t.Fatalf("sweep at expiry pruned %d dedup rows, want 0", rep.DedupPruned)
	}
	// Horizon: retention + 7 days after the item was acked or expired (at the latest 14 days
	// after acceptance), so until 35 days after acceptance both ids stay duplicates.
	r.clock.Advance(21*day - time.Millisecond)
	rep := r.sweep()
	if rep.DedupPruned != 0 {
		t.Fatalf("sweep before the horizon pruned %d, want 0", rep.DedupPruned)
	}
	if st := statuses(r.push(a, envItem(expiring, b), envItem(acked, b))); st[0] != "duplicate" || st[1] != "duplicate" {
		t.Fatalf("retries before the horizon = %v, want duplicates", st)
	}
	r.clock.Advance(time.Millisecond)
	rep = r.sweep()
	// The two items' rows; the notice to alpha (accepted at the first sweep) keeps its row.
	if rep.DedupPruned != 2 {
		t.Fatalf("sweep at the horizon pruned %d, want 2", rep.DedupPruned)
	}
	if st := statuses(r.push(a, envItem(acked, b))); st[0] != "accepted" {
		t.Fatalf("push after the horizon = %v, want accepted (the id is forgotten)", st)
	}
}

func TestSweepSkipsSenderThatIsGone(t *testing.T) {
	t.Parallel()
	r, a, b, _ := setup(t, nil)
	r.push(a, envItem("01KKNTQ2CN9WJ3MR4Q1P12F0G1", b))
	a2 := newHost(t, "alpha", 11)
	r.rotate(a, a2) // revokes alpha's old key
	r.clock.Advance(14 * day)
	rep := r.sweep()
	if rep.Expired.Envelope != 1 || rep.Notices != 0 || rep.NoticesSkipped.NotEnrolled != 1 {
		t.Fatalf("sweep = %+v, want the envelope expired and its notice skipped (sender revoked)", rep)
	}
}

func TestSweepBatchAndSweeperWakesSender(t *testing.T) {
	t.Parallel()
	ticks := make(chan time.Time)
	tm := newTimers()
	r, a, b, _ := setup(t, func(o *relayserver.Options) {
		o.SweepBatch = 2
		o.SweepTicker = func(time.Duration) (<-chan time.Time, func()) { return ticks, func() {} }
		o.WaitTimer = tm.start
	})
	ids3 := []string{"01KKNTQ2CN9WJ3MR4Q1P12F0B1", "01KKNTQ2CN9WJ3MR4Q1P12F0B2", "01KKNTQ2CN9WJ3MR4Q1P12F0B3"}
	for _, id := range ids3 {
		r.push(a, envItem(id, b))
	}
	r.clock.Advance(14 * day)
	poll := r.pollAsync(bg, a, "/v2/relay/items?after=0&wait=30")
	tm.parked(t)
	ctx, cancel := context.WithCancel(bg)
	done := make(chan struct{})
	go func() { defer close(done); r.srv.RunSweeper(ctx) }()
	defer func() { cancel(); <-done }()
	ticks <- r.clock.Now()
	pg := pageOf(t, await(t, poll))
	if len(pg.Items) == 0 || pg.Items[0].Kind != "expired" {
		t.Fatalf("woken pull = %+v, want expiry notices", pg)
	}
	// One tick runs batches until the backlog is gone: all three notices arrive.
	ticks <- r.clock.Now() // returns once the sweeper finished the previous tick's batches
	if got := ids(r.pull(a, 0)); len(got) != 3 {
		t.Fatalf("alpha's notices = %v, want 3", got)
	}
	if got := ids(r.pull(b, 0)); len(got) != 0 {
		t.Fatalf("beta's queue = %v, want empty", got)
	}
}

func TestServeRunsTheSweeperUntilShutdown(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	k := keyFor(t, 0)
	a, b := newHost(t, "alpha", 1), newHost(t, "beta", 2)
	st, err := sqlitestore.Open(bg, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	wire := envWire("01KKNTQ2CN9WJ3MR4Q1P12F02T", "")
	err = st.Update(bg, func(tx relayserver.Tx) error {
		for _, h := range []host{a, b} {
			if err := tx.PutEnrolment(relayserver.Enrolment{HostPubkey: h.pub(), HostName: h.name,
				AuthorizedBy: "test", EnrolledAt: t0}); err != nil {
				return err
			}
		}
		_, err := tx.InsertItem(relayserver.Item{Target: b.pub(), Kind: relayserver.KindEnvelope,
			ItemID: "01KKNTQ2CN9WJ3MR4Q1P12F02T", Sender: a.pub(), Wire: wire, WireHash: mbx.SHA256Hex(wire),
			AcceptedAt: t0, ExpiresAt: t0.Add(14 * day)})
		return err
	})
	st.Close()
	if err != nil {
		t.Fatal(err)
	}

	ticks := make(chan time.Time)
	stopped := make(chan struct{})
	cfg := serveConfig(dir, k, t0.Add(14*day), nil)
	cfg.Options.SweepTicker = func(time.Duration) (<-chan time.Time, func()) {
		return ticks, func() { close(stopped) }
	}
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- relayserver.Serve(ctx, cfg) }()
	ticks <- t0
	ticks <- t0 // taken once the first tick's sweep is done
	cancel()
	select {
	case err := <-errc:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(failsafe):
		t.Fatal("Serve did not return")
	}
	select {
	case <-stopped:
	default:
		t.Fatal("the sweeper's ticker was not stopped")
	}
	st, err = sqlitestore.Open(bg, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if p, err := st.Pull(bg, b.pub(), 0, 10, 1<<20); err != nil || len(p.Items) != 0 {
		t.Fatalf("beta's queue = %+v, %v, want empty", p.Items, err)
	}
	p, err := st.Pull(bg, a.pub(), 0, 10, 1<<20)
	if err != nil || len(p.Items) != 1 || p.Items[0].Kind != relayserver.KindExpired || p.Items[0].Sender != k.PublicKey() {
		t.Fatalf("alpha's queue = %+v, %v, want the relay's notice", p.Items, err)
	}
}
