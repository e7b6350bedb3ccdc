package checkpoint

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/mbx"
)

// memRelay is an in-memory relay queue for one receiving host.
type memRelay struct {
	mu      sync.Mutex
	epoch   string
	items   []mbx.PullItem // in seq order
	head    int64
	acked   int64
	pullErr []error // returned first, one per pull
	ackErr  []error // returned first, one per ack
	pulls   []PullRequest
	acks    []int64
}

func (m *memRelay) add(items ...mbx.PullItem) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, it := range items {
		m.items = append(m.items, it)
		m.head = max(m.head, it.Seq)
	}
}

func (m *memRelay) Pull(_ context.Context, r PullRequest) (mbx.PullResponse, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.pulls = append(m.pulls, r)
	if len(m.pullErr) > 0 {
		err := m.pullErr[0]
		m.pullErr = m.pullErr[1:]
		return mbx.PullResponse{}, err
	}
	if r.Epoch != "" && r.Epoch != m.epoch {
		return mbx.PullResponse{}, &RelayError{Kind: ErrEpochChanged, Epoch: m.epoch, Err: errors.New("pull: 409 epoch changed")}
	}
	p := mbx.PullResponse{Epoch: m.epoch, HeadSeq: m.head, LastSeq: r.After, Items: []mbx.PullItem{}}
	for _, it := range m.items {
		if it.Seq <= r.After {
			continue
		}
		if r.Limit > 0 && len(p.Items) == r.Limit {
			p.More = true
			break
		}
		p.Items = append(p.Items, it)
		p.LastSeq = it.Seq
	}
	return p, nil
}

func (m *memRelay) Ack(_ context.Context, epoch string, through int64) (mbx.AckResponse, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.acks = append(m.acks, through)
	if len(m.ackErr) > 0 {
		err := m.ackErr[0]
		m.ackErr = m.ackErr[1:]
		return mbx.AckResponse{}, err
	}
	if epoch != m.epoch {
		return mbx.AckResponse{}, &RelayError{Kind: ErrEpochChanged, Epoch: m.epoch, Err: errors.New("ack: 409 epoch changed")}
	}
	if through > m.head {
		return mbx.AckResponse{}, &RelayError{Kind: ErrRewound, Err: errors.New("ack: 400 " + mbx.CodeBadAck)}
	}
	n := int64(0)
	m.items = slices.DeleteFunc(m.items, func(it mbx.PullItem) bool {
		if it.Seq <= through {
			n++
			return true
		}
		return false
	})
	m.acked = max(m.acked, through)
	return mbx.AckResponse{AckedThrough: m.acked, Deleted: n, HeadSeq: m.head}, nil
}

// restore replaces the queue as a restore would: a new epoch (or the same one when keep is true)
// and the given items.
func (m *memRelay) restore(epoch string, head int64, items ...mbx.PullItem) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.epoch, m.items, m.head, m.acked = epoch, items, head, 0
}

func (m *memRelay) snapshot() (pulls []PullRequest, acks []int64, left int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.pulls), slices.Clone(m.acks), len(m.items)
}

// sleeper records the pauses of a Run and ends it (cancels) when stop says so.
type sleeper struct {
	mu     sync.Mutex
	pauses []time.Duration
	stop   func(n int, d time.Duration) bool
	cancel context.CancelFunc
}

func (s *sleeper) sleep(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	s.pauses = append(s.pauses, d)
	n := len(s.pauses)
	s.mu.Unlock()
	if s.stop(n, d) {
		s.cancel()
	}
	return ctx.Err()
}

// samePauses compares a Run's pauses with want: the idle pause exactly, a backoff within its
// ±20% jitter.
func samePauses(got, want []time.Duration) bool {
	if len(got) != len(want) {
		return false
	}
	for i, w := range want {
		if w == DefaultIdle {
			if got[i] != w {
				return false
			}
		} else if got[i] < w*8/10 || got[i] > w*12/10 {
			return false
		}
	}
	return true
}

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

func newRun(t *testing.T, s *Store, m *memRelay, h Handler, o ReceiverOptions, stop func(n int, d time.Duration) bool) (*Receiver, *sleeper, context.Context) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	sl := &sleeper{stop: stop, cancel: cancel}
	o.Sleep, o.Logger = sl.sleep, quiet()
	r, err := s.NewReceiver(relayURL, m, h, &o)
	if err != nil {
		t.Fatal(err)
	}
	return r, sl, ctx
}

// idleStop ends a Run at its first idle pause.
func idleStop(n int, d time.Duration) bool { return d == DefaultIdle || n > 50 }

func TestReceiverDrainsInPagesAndAcks(t *testing.T) {
	s := openStore(t, "")
	m := &memRelay{epoch: "ep1"}
	for i := int64(1); i <= 7; i++ {
		m.add(pitem(1000+i, string(rune('a'+i))))
	}
	h := &mailbox{}
	r, sl, ctx := newRun(t, s, m, h, ReceiverOptions{Limit: 3}, idleStop)
	if err := r.Run(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("run: %v", err)
	}
	if len(h.calls) != 7 || len(stored(t, s)) != 7 {
		t.Fatalf("handled %v, want 7 items once each", h.calls)
	}
	pulls, acks, left := m.snapshot()
	if left != 0 {
		t.Fatalf("%d items left at the relay, want 0", left)
	}
	if !slices.Equal(acks, []int64{1003, 1006, 1007}) {
		t.Fatalf("acks %v, want one per page through its last seq", acks)
	}
	// Each pull asks after the committed position; from 0 without an epoch, then with it.
	wantAfter := []int64{0, 1003, 1006, 1007}
	for i, p := range pulls {
		if p.After != wantAfter[i] || p.Limit != 3 || (p.After > 0) != (p.Epoch == "ep1") {
			t.Fatalf("pull %d: %+v, want after %d with the epoch once past 0", i, p, wantAfter[i])
		}
	}
	if sl.pauses[len(sl.pauses)-1] != DefaultIdle || len(sl.pauses) != 1 {
		t.Fatalf("pauses %v, want only the final idle pause", sl.pauses)
	}
}

func TestReceiverAckFailureOnlyRepeatsTheAck(t *testing.T) {
	s := openStore(t, "")
	m := &memRelay{epoch: "ep1", ackErr: []error{&RelayError{Err: errors.New("ack: 503")}}}
	m.add(pitem(10, "a"), pitem(20, "b"))
	h := &mailbox{}
	r, err := s.NewReceiver(relayURL, m, h, &ReceiverOptions{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	st, err := r.Step(context.Background())
	if err != nil || st.AckErr == nil || st.Acked != 0 || st.Position.ReceivedThrough != 20 {
		t.Fatalf("step 1: %+v, %v; want a committed position 20 and a failed ack", st, err)
	}
	// The relay still holds both items; the next step pulls nothing new and acks again.
	st, err = r.Step(context.Background())
	if err != nil || st.Acked != 20 || st.Done() != 0 {
		t.Fatalf("step 2: %+v, %v; want the ack through 20 and nothing reprocessed", st, err)
	}
	if _, _, left := m.snapshot(); left != 0 || len(h.calls) != 2 {
		t.Fatalf("left %d at the relay, handled %v", left, h.calls)
	}
	// Nothing new: no ack is sent.
	_, acks, _ := m.snapshot()
	if _, err := r.Step(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, acks2, _ := m.snapshot(); len(acks2) != len(acks) {
		t.Fatalf("acks %v after an empty step, want no new ack", acks2)
	}
}

func TestReceiverEpochChangeRepullsAndReports(t *testing.T) {
	s := openStore(t, "")
	m := &memRelay{epoch: "ep1"}
	m.add(pitem(10, "a"), pitem(20, "b"))
	h := &mailbox{}
	var resets []Position
	o := ReceiverOptions{Logger: quiet(), OnReset: func(_ context.Context, p Position) { resets = append(resets, p) }}
	r, err := s.NewReceiver(relayURL, m, h, &o)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Step(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The relay is restored from a backup: new epoch, it holds b again plus a new item c.
	m.restore("ep2", 50, pitem(30, "b"), pitem(50, "c"))
	st, err := r.Step(context.Background()) // 409 → reset
	if err != nil || st.Reset != ResetEpochChanged || st.Position.Epoch != "ep2" || st.Position.ReceivedThrough != 0 {
		t.Fatalf("step after the restore: %+v, %v; want an epoch-changed reset to ep2/0", st, err)
	}
	if len(resets) != 1 || resets[0].Epoch != "ep2" {
		t.Fatalf("OnReset calls %+v, want one for ep2", resets)
	}
	st, err = r.Step(context.Background())
	if err != nil || st.Duplicates != 1 || st.Accepted != 1 || st.Acked != 50 {
		t.Fatalf("re-pull: %+v, %v; want b duplicate, c accepted, ack 50", st, err)
	}
	if got := stored(t, s); len(got) != 3 {
		t.Fatalf("mailbox %v, want a, b, c once each", got)
	}
}

func TestReceiverRewindAndBadAck(t *testing.T) {
	s := openStore(t, "")
	m := &memRelay{epoch: "ep1"}
	m.add(pitem(10, "a"), pitem(20, "b"))
	h := &mailbox{}
	var reasons []ResetReason
	o := ReceiverOptions{Logger: quiet(), OnReset: func(_ context.Context, p Position) { reasons = append(reasons, p.LastReset.Reason) }}
	r, _ := s.NewReceiver(relayURL, m, h, &o)
	if _, err := r.Step(context.Background()); err != nil {
		t.Fatal(err)
	}
	// A restore that kept its epoch: the head went below our position.
	m.restore("ep1", 15, pitem(10, "a"), pitem(15, "x"))
	st, err := r.Step(context.Background())
	if err != nil || st.Reset != ResetRewound {
		t.Fatalf("rewound step: %+v, %v", st, err)
	}
	st, err = r.Step(context.Background())
	if err != nil || st.Accepted != 1 || st.Duplicates != 1 || st.Acked != 15 {
		t.Fatalf("re-pull after the rewind: %+v, %v", st, err)
	}
	// The relay loses its head again between our pull and our ack: BAD_ACK.
	m.add(pitem(40, "y"))
	m.ackErr = []error{&RelayError{Kind: ErrRewound, Err: errors.New("ack: 400 " + mbx.CodeBadAck)}}
	st, err = r.Step(context.Background())
	if err != nil || st.Reset != ResetBadAck || st.Position.ReceivedThrough != 0 {
		t.Fatalf("BAD_ACK step: %+v, %v; want a bad-ack reset to 0", st, err)
	}
	if !slices.Equal(reasons, []ResetReason{ResetRewound, ResetBadAck}) {
		t.Fatalf("OnReset reasons %v", reasons)
	}
	if got := stored(t, s); len(got) != 4 {
		t.Fatalf("mailbox %v, want a, b, x, y once each", got)
	}
}

func TestReceiverHandlerFailureBacksOffAndResumes(t *testing.T) {
	s := openStore(t, "")
	m := &memRelay{epoch: "ep1"}
	m.add(pitem(10, "a"), pitem(20, "b"), pitem(30, "c"))
	errDisk := errors.New("disk full")
	h := &mailbox{fail: map[string]error{"b": errDisk}}
	stop := func(n int, d time.Duration) bool {
		if n == 3 {
			delete(h.fail, "b") // the disk has room again
		}
		return d == DefaultIdle || n > 50
	}
	r, sl, ctx := newRun(t, s, m, h, ReceiverOptions{}, stop)
	if err := r.Run(ctx); !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	_, acks, left := m.snapshot()
	if left != 0 || !slices.Equal(acks, []int64{10, 30}) {
		t.Fatalf("acks %v, left %d; want a first ack through 10 (before the failure), then 30", acks, left)
	}
	wantPauses := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, DefaultIdle}
	if !samePauses(sl.pauses, wantPauses) {
		t.Fatalf("pauses %v, want %v", sl.pauses, wantPauses)
	}
	if got := stored(t, s); len(got) != 3 {
		t.Fatalf("mailbox %v, want a, b, c", got)
	}
}

func TestReceiverReenrolsOnce(t *testing.T) {
	s := openStore(t, "")
	notEnrolled := &RelayError{Kind: ErrNotEnrolled, Err: errors.New("pull: 401")}
	m := &memRelay{epoch: "ep1", pullErr: []error{notEnrolled, notEnrolled, notEnrolled}}
	m.add(pitem(10, "a"))
	enrols := 0
	o := ReceiverOptions{Reenrol: func(context.Context) error { enrols++; return nil }}
	r, sl, ctx := newRun(t, s, m, &mailbox{}, o, idleStop)
	if err := r.Run(ctx); !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	// First refusal: re-enrol and retry at once. Second: back off (a relay that still refuses gets
	// no tight loop). Third: back off again. Then the pull works.
	if enrols != 1 || !samePauses(sl.pauses, []time.Duration{time.Second, 2 * time.Second, DefaultIdle}) {
		t.Fatalf("enrols %d, pauses %v", enrols, sl.pauses)
	}
	if got := stored(t, s); len(got) != 1 {
		t.Fatalf("mailbox %v, want a", got)
	}
}

func TestReceiverStopsOnRelayKeyChange(t *testing.T) {
	s := openStore(t, "")
	m := &memRelay{epoch: "ep1", pullErr: []error{&RelayError{Kind: ErrKeyChanged, Err: errors.New("relay key changed at " + relayURL)}}}
	r, _, ctx := newRun(t, s, m, &mailbox{}, ReceiverOptions{}, idleStop)
	if err := r.Run(ctx); !errors.Is(err, ErrKeyChanged) {
		t.Fatalf("run: %v, want ErrRelayKeyChanged", err)
	}
}

func TestReceiverRetryAfterAndLongPoll(t *testing.T) {
	s := openStore(t, "")
	m := &memRelay{epoch: "ep1", pullErr: []error{&RelayError{Err: errors.New("pull: 429"), RetryAfter: 30 * time.Second}}}
	now := t0
	clock := func() time.Time { return now }
	// The relay holds each empty long poll for the whole wait: the clock moves while it does.
	held := &heldRelay{memRelay: m, advance: func() { now = now.Add(20 * time.Second) }}
	stop := func(n int, _ time.Duration) bool { return n >= 1 && len(held.memRelay.pulls) >= 4 }
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sl := &sleeper{stop: stop, cancel: cancel}
	r, err := s.NewReceiver(relayURL, held, &mailbox{}, &ReceiverOptions{Wait: 20 * time.Second, Clock: clock, Sleep: sl.sleep, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	held.stopAfter, held.cancel = 4, cancel
	if err := r.Run(ctx); !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	// One pause: the Retry-After of the 429. The held polls follow each other without a pause.
	if !slices.Equal(sl.pauses, []time.Duration{30 * time.Second}) {
		t.Fatalf("pauses %v, want only the 30 s Retry-After", sl.pauses)
	}
	for _, p := range m.pulls {
		if p.Wait != 20*time.Second {
			t.Fatalf("pull %+v without the wait", p)
		}
	}
}

// heldRelay is a memRelay whose empty answers take the whole long-poll wait; it cancels the run
// after stopAfter pulls.
type heldRelay struct {
	*memRelay
	advance   func()
	stopAfter int
	cancel    context.CancelFunc
}

func (h *heldRelay) Pull(ctx context.Context, r PullRequest) (mbx.PullResponse, error) {
	p, err := h.memRelay.Pull(ctx, r)
	if err == nil && len(p.Items) == 0 {
		h.advance()
	}
	if len(h.memRelay.pulls) >= h.stopAfter {
		h.cancel()
	}
	return p, err
}

// moreRelay says there is more on every page, however empty; it cancels the run after stopAfter
// pulls.
type moreRelay struct {
	*memRelay
	stopAfter int
	cancel    context.CancelFunc
}

func (m *moreRelay) Pull(ctx context.Context, r PullRequest) (mbx.PullResponse, error) {
	p, err := m.memRelay.Pull(ctx, r)
	p.More = true
	if len(m.memRelay.pulls) >= m.stopAfter {
		m.cancel()
	}
	return p, err
}

// TestReceiverPausesWithoutProgress: a relay whose pages say "more" but bring nothing new (a faulty
// or hostile relay) gets the idle pause between pulls, not a tight loop of requests.
func TestReceiverPausesWithoutProgress(t *testing.T) {
	s := openStore(t, "")
	m := &memRelay{epoch: "ep1"}
	m.add(pitem(10, "a"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sl := &sleeper{stop: func(int, time.Duration) bool { return false }, cancel: cancel}
	mr := &moreRelay{memRelay: m, stopAfter: 5, cancel: cancel}
	r, err := s.NewReceiver(relayURL, mr, &mailbox{}, &ReceiverOptions{Sleep: sl.sleep, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Run(ctx); !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	// The first page brings item 10 (progress: pull again at once); the next ones bring nothing.
	want := []time.Duration{DefaultIdle, DefaultIdle, DefaultIdle}
	if !slices.Equal(sl.pauses, want) {
		t.Fatalf("pauses %v, want %v", sl.pauses, want)
	}
	if got := stored(t, s); len(got) != 1 {
		t.Fatalf("mailbox %v, want a", got)
	}
}

// TestReceiverBackoffIsJitteredWithinBounds: after failed steps the pauses double from
// MinBackoff up to MaxBackoff, each within ±20%, and they are not all on the exact schedule (the
// jitter that keeps hosts of one relay from pulling in step).
func TestReceiverBackoffIsJitteredWithinBounds(t *testing.T) {
	s := openStore(t, "")
	down := errors.New("pull: connection refused")
	m := &memRelay{epoch: "ep1", pullErr: slices.Repeat([]error{down}, 12)}
	r, sl, ctx := newRun(t, s, m, &mailbox{}, ReceiverOptions{MinBackoff: time.Second, MaxBackoff: 8 * time.Second}, idleStop)
	if err := r.Run(ctx); !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	want := []time.Duration{1, 2, 4, 8, 8, 8, 8, 8, 8, 8, 8, 8}
	for i := range want {
		want[i] *= time.Second
	}
	want = append(want, DefaultIdle)
	if !samePauses(sl.pauses, want) {
		t.Fatalf("pauses %v, want %v each ±20%%", sl.pauses, want)
	}
	exact := 0
	for i, w := range want {
		if sl.pauses[i] == w {
			exact++
		}
	}
	if exact == len(want) {
		t.Fatalf("pauses %v: no jitter at all", sl.pauses)
	}
}
