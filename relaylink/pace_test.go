package relaylink

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/agentmbx/agentmbx/internal/testkit"
	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/outbox"
)

var paceT0 = time.Date(2026, 10, 2, 10, 0, 0, 0, time.UTC)

func paceRows(prefix string, n, size int) []outbox.Row {
	rows := make([]outbox.Row, n)
	for i := range rows {
		rows[i] = outbox.Row{ItemID: fmt.Sprintf("%s-%d", prefix, i), Host: prefix, Wire: make([]byte, size)}
	}
	return rows
}

// recorder is a relay seen from the Pacer: it answers every row accepted (an outcome of kind
// OutcomeRelayAccepted without a statement is enough here) and records each request.
type recorder struct {
	clock  *testkit.Clock
	mu     sync.Mutex
	at     []time.Time
	sizes  []int
	ids    [][]string
	hold   chan struct{} // when set, each request waits for a receive on it
	began  chan struct{} // when set, told when a request begins
	answer func(rows []outbox.Row) []outbox.Outcome
}

func (r *recorder) push(_ *Pusher, _ context.Context, rows []outbox.Row) []outbox.Outcome {
	if r.began != nil {
		r.began <- struct{}{}
	}
	if r.hold != nil {
		<-r.hold
	}
	r.mu.Lock()
	r.at = append(r.at, r.clock.Now())
	r.sizes = append(r.sizes, len(rows))
	ids := make([]string, len(rows))
	for i, row := range rows {
		ids[i] = row.ItemID
	}
	r.ids = append(r.ids, ids)
	r.mu.Unlock()
	if r.answer != nil {
		return r.answer(rows)
	}
	out := make([]outbox.Outcome, len(rows))
	for i := range out {
		out[i] = outbox.Outcome{Kind: outbox.OutcomeRelayAccepted}
	}
	return out
}

func newTestPacer(l mbx.Limits) (*Pacer, *recorder) {
	clock := testkit.NewClock(paceT0)
	pc := NewPacer(l, clock.Now, clock.Advance)
	rec := &recorder{clock: clock}
	pc.push = rec.push
	return pc, rec
}

func TestPaceForSizesTheBucketUnderTheRelaysBudget(t *testing.T) {
	tests := []struct {
		announced int
		rate      rate.Limit
		burst     int
	}{
		{0, 1.8, 12},   // not announced: the 0.5.x default of 120 a minute
		{120, 1.8, 12}, // the same, announced
		{600, 9, 60},   // a relay that allows more
		{5, 0.075, 1},  // a stingy relay: never a burst of 0
		{-3, 1.8, 12},  // nonsense: the default
	}
	for _, tc := range tests {
		r, b := PaceFor(mbx.Limits{PushesPerMinute: tc.announced})
		if d := float64(r - tc.rate); d > 1e-9 || d < -1e-9 || b != tc.burst {
			t.Errorf("PaceFor(%d a minute) = %v/s burst %d, want %v/s burst %d", tc.announced, r, b, tc.rate, tc.burst)
		}
		ppm := tc.announced
		if ppm <= 0 {
			ppm = mbx.PushesPerMinute
		}
		// Inside the relay's own bucket (a burst of the budget, refilled at budget/60 a second),
		// so the host's requests never outrun it.
		if float64(r) > float64(ppm)/60 || b > ppm || b < 1 {
			t.Errorf("PaceFor(%d) = %v/s burst %d: outside the relay's bucket", tc.announced, r, b)
		}
	}
}

// TestPacerStaysUnderTheRelaysLimit: 400 sends of one row each, one after the other as fast as
// the Pacer lets them go, against the relay's own bucket (the relayserver's: a burst of the whole
// budget, refilled evenly) on the same fake clock: not one request is refused.
func TestPacerStaysUnderTheRelaysLimit(t *testing.T) {
	pc, rec := newTestPacer(mbx.DefaultLimits())
	relay := rate.NewLimiter(rate.Limit(float64(mbx.PushesPerMinute)/60), mbx.PushesPerMinute)
	for i := range 400 {
		out := pc.send(context.Background(), &Pusher{}, paceRows(fmt.Sprintf("m%d", i), 1, 10))
		if out[0].Kind != outbox.OutcomeRelayAccepted {
			t.Fatalf("send %d: %+v", i, out[0])
		}
	}
	refused := 0
	for _, at := range rec.at {
		if !relay.AllowN(at, 1) {
			refused++
		}
	}
	if refused != 0 || len(rec.at) != 400 {
		t.Fatalf("%d requests, %d over the relay's limit; want 400, none over", len(rec.at), refused)
	}
	// And it did not crawl: 400 requests at 1.8/s after a burst of 12 take about 216 s.
	if took := rec.at[len(rec.at)-1].Sub(paceT0); took > 230*time.Second {
		t.Fatalf("400 requests took %v of fake time, want about 216 s", took)
	}
	if st := pc.Stats(); st.Requests != 400 || st.Rows != 400 || st.Refused != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestPacerCoalescesWhileAPushIsInFlight: rows handed in while a request is in flight go out
// together in the next request, from every sender.
func TestPacerCoalescesWhileAPushIsInFlight(t *testing.T) {
	pc, rec := newTestPacer(mbx.DefaultLimits())
	rec.hold, rec.began = make(chan struct{}), make(chan struct{}, 10)
	var wg sync.WaitGroup
	results := make([][]outbox.Outcome, 3)
	send := func(i int, rows []outbox.Row) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = pc.send(context.Background(), &Pusher{}, rows)
		}()
	}
	send(0, paceRows("beta", 3, 10))
	<-rec.began // the first request is in flight
	send(1, paceRows("gamma", 2, 10))
	send(2, paceRows("beta2", 4, 10))
	waitQueued(t, pc, 2)
	rec.hold <- struct{}{} // the first request answers
	<-rec.began
	rec.hold <- struct{}{}
	wg.Wait()
	if len(rec.sizes) != 2 || rec.sizes[0] != 3 || rec.sizes[1] != 6 {
		t.Fatalf("requests of %v rows, want [3 6]", rec.sizes)
	}
	for i, want := range []int{3, 2, 4} {
		if len(results[i]) != want {
			t.Fatalf("send %d got %d outcomes, want %d", i, len(results[i]), want)
		}
		for _, o := range results[i] {
			if o.Kind != outbox.OutcomeRelayAccepted {
				t.Fatalf("send %d: %+v", i, o)
			}
		}
	}
}

func waitQueued(t *testing.T, pc *Pacer, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		pc.mu.Lock()
		got := len(pc.queue)
		pc.mu.Unlock()
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d sends queued, want %d", got, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestPacerSplitsAtMaxBatchAndBodyCap: a request holds at most max_batch rows and MaxPushBytes
// of wire (one row at least), and each send gets its own outcomes in order.
func TestPacerSplitsAtMaxBatchAndBodyCap(t *testing.T) {
	l := mbx.DefaultLimits()
	l.MaxBatch = 5
	pc, rec := newTestPacer(l)
	out := pc.send(context.Background(), &Pusher{}, paceRows("beta", 12, 10))
	if len(out) != 12 || fmt.Sprint(rec.sizes) != "[5 5 2]" {
		t.Fatalf("%d outcomes in requests of %v rows, want 12 in [5 5 2]", len(out), rec.sizes)
	}
	if rec.ids[1][0] != "beta-5" || rec.ids[2][1] != "beta-11" {
		t.Fatalf("rows out of order: %v", rec.ids)
	}
	pc2, rec2 := newTestPacer(mbx.DefaultLimits())
	pc2.send(context.Background(), &Pusher{}, paceRows("big", 3, 2<<20))
	if fmt.Sprint(rec2.sizes) != "[2 1]" {
		t.Fatalf("3 rows of 2 MiB went in requests of %v rows, want [2 1] under %d bytes", rec2.sizes, MaxPushBytes)
	}
}

// TestPacerLinkRefusalAnswersTheQueue: a request refused for the link (rejected:rate) answers
// the rows queued behind it with the same refusal, without another request.
func TestPacerLinkRefusalAnswersTheQueue(t *testing.T) {
	pc, rec := newTestPacer(mbx.DefaultLimits())
	rec.hold, rec.began = make(chan struct{}), make(chan struct{}, 10)
	rec.answer = func(rows []outbox.Row) []outbox.Outcome {
		out := make([]outbox.Outcome, len(rows))
		for i := range out {
			out[i] = outbox.Outcome{Kind: outbox.OutcomeRejected, Err: &Refusal{Code: "rate"}, Retryable: true}
		}
		return out
	}
	var wg sync.WaitGroup
	var second []outbox.Outcome
	wg.Add(1)
	go func() { defer wg.Done(); pc.send(context.Background(), &Pusher{}, paceRows("beta", 2, 10)) }()
	<-rec.began
	wg.Add(1)
	go func() { defer wg.Done(); second = pc.send(context.Background(), &Pusher{}, paceRows("gamma", 3, 10)) }()
	waitQueued(t, pc, 1)
	rec.hold <- struct{}{}
	wg.Wait()
	if len(rec.sizes) != 1 {
		t.Fatalf("%d requests, want 1: the queue went on after a rate refusal", len(rec.sizes))
	}
	for _, o := range second {
		if d, ok := LinkRefusal(o); !ok || d != RatePause {
			t.Fatalf("queued row answered %+v, want the link refusal", o)
		}
	}
	if st := pc.Stats(); st.Refused != 1 {
		t.Fatalf("stats %+v, want one refused request", st)
	}
}

// TestPacerCallerThatGivesUpSendsNothing: a send whose context ends while it waits in the queue
// is answered ErrNotSent, and its rows never reach the relay.
func TestPacerCallerThatGivesUpSendsNothing(t *testing.T) {
	pc, rec := newTestPacer(mbx.DefaultLimits())
	rec.hold, rec.began = make(chan struct{}), make(chan struct{}, 10)
	go pc.send(context.Background(), &Pusher{}, paceRows("beta", 1, 10))
	<-rec.began
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan []outbox.Outcome)
	go func() { done <- pc.send(ctx, &Pusher{}, paceRows("gamma", 2, 10)) }()
	waitQueued(t, pc, 1)
	cancel()
	out := <-done
	for _, o := range out {
		if !errors.Is(o.Err, ErrNotSent) || !errors.Is(o.Err, context.Canceled) {
			t.Fatalf("outcome %+v, want ErrNotSent (canceled)", o)
		}
	}
	rec.hold <- struct{}{}
	waitIdle(t, pc)
	for _, ids := range rec.ids {
		for _, id := range ids {
			if id == "gamma-0" || id == "gamma-1" {
				t.Fatalf("a row given up on was pushed: %v", rec.ids)
			}
		}
	}
}

func waitIdle(t *testing.T, pc *Pacer) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		pc.mu.Lock()
		running := pc.running
		pc.mu.Unlock()
		if !running {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the pacer's runner did not stop")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestPacerSetLimitsResizes: limits announced later take effect for the next token.
func TestPacerSetLimitsResizes(t *testing.T) {
	pc, rec := newTestPacer(mbx.DefaultLimits())
	l := mbx.DefaultLimits()
	l.PushesPerMinute = 6000 // 90/s, burst 600
	pc.SetLimits(l)
	for i := range 300 {
		pc.send(context.Background(), &Pusher{}, paceRows(fmt.Sprintf("m%d", i), 1, 10))
	}
	// The bucket does not fill up at once: after the first 12 the rest go at 90/s, about 3.2 s
	// of fake time (at the old 1.8/s, 160 s).
	if took := rec.at[len(rec.at)-1].Sub(paceT0); took > 4*time.Second {
		t.Fatalf("300 requests at 90/s took %v of fake time, want about 3.2 s", took)
	}
}

// TestPacerNamesAnItemOnceARequest: the same message for two hosts (one item id, two rows) never
// goes twice in one request: the second copy waits for the next, and each row gets its own
// outcome.
func TestPacerNamesAnItemOnceARequest(t *testing.T) {
	pc, rec := newTestPacer(mbx.DefaultLimits())
	rec.hold, rec.began = make(chan struct{}), make(chan struct{}, 10)
	sameIDs := func(host string, n int) []outbox.Row {
		rows := paceRows(host, n, 10)
		for i := range rows {
			rows[i].ItemID = fmt.Sprintf("msg-%d", i)
		}
		return rows
	}
	var wg sync.WaitGroup
	results := make([][]outbox.Outcome, 3)
	for i, rows := range [][]outbox.Row{paceRows("first", 1, 10), sameIDs("beta", 3), sameIDs("gamma", 2)} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = pc.send(context.Background(), &Pusher{}, rows)
		}()
		if i == 0 {
			<-rec.began // the first request is in flight; the others queue behind it
		}
	}
	waitQueued(t, pc, 2)
	close(rec.hold) // the first request answers, and the later ones go through
	wg.Wait()
	for i, ids := range rec.ids {
		seen := map[string]bool{}
		for _, id := range ids {
			if seen[id] {
				t.Fatalf("request %d names %s twice: %v", i, id, ids)
			}
			seen[id] = true
		}
	}
	if fmt.Sprint(rec.sizes) != "[1 3 2]" {
		t.Fatalf("requests of %v rows, want [1 3 2] (beta's three, then gamma's two)", rec.sizes)
	}
	if len(results[1]) != 3 || len(results[2]) != 2 || results[2][1].Kind != outbox.OutcomeRelayAccepted {
		t.Fatalf("outcomes %v", results)
	}
}
