package reach

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// fakeClock is a clock the test moves by hand.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// TestTrackerStateMachine walks one target through its states and checks what each transition
// tells the hooks: Down once per entry, Up once per entry with the outage's length measured from
// the first Down since the last Up (a Quiet spell in between does not end the outage).
func TestTrackerStateMachine(t *testing.T) {
	clk := &fakeClock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	var ups []Recovery
	var downs []Target
	tr := New(Config{Clock: clk.Now, OnUp: func(r Recovery) { ups = append(ups, r) }, OnDown: func(t Target) { downs = append(downs, t) }})
	peer := LAN("beta")

	if st := tr.Get(peer); st.State != Unknown || !st.Since.IsZero() {
		t.Fatalf("fresh target: %+v", st)
	}
	tr.Up(peer) // first answer since the start: a recovery from Unknown
	if len(ups) != 1 || ups[0].From != Unknown || ups[0].Outage != 0 {
		t.Fatalf("first up: %+v", ups)
	}
	tr.Up(peer) // no transition, no hook
	if len(ups) != 1 {
		t.Fatalf("repeated up told the hook again: %+v", ups)
	}

	start := clk.Now()
	clk.Add(time.Second)
	tr.Down(peer)
	down := clk.Now()
	clk.Add(5 * time.Second)
	tr.Down(peer) // a failed probe: still Down, Last moves, Since stays
	if st := tr.Get(peer); st.State != Down || !st.Since.Equal(down) || !st.Last.Equal(clk.Now()) || !st.OutageSince.Equal(down) {
		t.Fatalf("down: %+v (went down at %v)", st, down)
	}
	if len(downs) != 1 || downs[0] != peer {
		t.Fatalf("OnDown told %v, want once for %s", downs, peer)
	}
	clk.Add(4 * time.Second)
	tr.Quiet(peer) // answers an error: reachable, the outage goes on
	if st := tr.Get(peer); st.State != Quiet || !st.OutageSince.Equal(down) {
		t.Fatalf("quiet after down: %+v", st)
	}
	clk.Add(10 * time.Second)
	tr.Up(peer)
	if len(ups) != 2 || ups[1].From != Quiet || ups[1].Outage != 19*time.Second {
		t.Fatalf("up after the outage: %+v (start %v)", ups, start)
	}
	if st := tr.Get(peer); !st.OutageSince.IsZero() {
		t.Fatalf("outage not ended by up: %+v", st)
	}

	// A Quiet spell alone is no outage, but still a recovery.
	tr.Quiet(peer)
	tr.Up(peer)
	if len(ups) != 3 || ups[2].From != Quiet || ups[2].Outage != 0 {
		t.Fatalf("up after a quiet spell: %+v", ups[2])
	}

	// DownWithin: a Down mark fades when nothing refreshes it.
	tr.Down(peer)
	if !tr.DownWithin(peer, time.Minute) {
		t.Fatal("fresh down mark not within a minute")
	}
	clk.Add(time.Minute)
	if tr.DownWithin(peer, time.Minute) {
		t.Fatal("a minute-old down mark still counts")
	}
	if !tr.Is(peer, Down) {
		t.Fatal("the state itself does not fade")
	}

	tr.Up(Relay)
	all := tr.All()
	if len(all) != 2 || all[0].Target != Relay || all[1].Target != peer {
		t.Fatalf("All = %+v, want the relay first", all)
	}
	if got := tr.InState(Down); len(got) != 1 || got[0] != peer {
		t.Fatalf("InState(Down) = %v", got)
	}
	tr.Forget(peer)
	if tr.Get(peer).State != Unknown {
		t.Fatal("Forget kept the state")
	}
	if h, ok := peer.Peer(); !ok || h != "beta" {
		t.Fatalf("Peer() = %q %v", h, ok)
	}
	if _, ok := Relay.Peer(); ok {
		t.Fatal("the relay is no peer")
	}
}

// TestProberProbesADownTargetUntilItAnswers: a Down target is probed at most Every apart (each
// wait jittered below it), until a probe finds it up; then the loop ends and OnUp ran once.
func TestProberProbesADownTargetUntilItAnswers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var ups atomic.Int32
		var tr *Tracker
		tr = New(Config{OnUp: func(Recovery) { ups.Add(1) }})
		var mu sync.Mutex
		var probeTimes []time.Time
		probes := func() []time.Time {
			mu.Lock()
			defer mu.Unlock()
			return append([]time.Time(nil), probeTimes...)
		}
		var back atomic.Bool
		p := NewProber(ProberConfig{Tracker: tr, Rand: func() float64 { return 0.999 },
			Probe: func(_ context.Context, target Target) bool {
				mu.Lock()
				probeTimes = append(probeTimes, time.Now())
				mu.Unlock()
				if back.Load() {
					tr.Up(target)
				} else {
					tr.Down(target)
				}
				return true
			}})
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		p.Start(ctx)
		start := time.Now()
		tr.Down(Relay)
		p.Watch(Relay)
		p.Watch(Relay) // one loop per target
		time.Sleep(12 * time.Second)
		synctest.Wait()
		got := probes()
		if len(got) != 2 {
			t.Fatalf("%d probes in 12 s, want 2", len(got))
		}
		for i, at := range got {
			prev := start
			if i > 0 {
				prev = got[i-1]
			}
			if d := at.Sub(prev); d > DefaultEvery || d < time.Duration(float64(DefaultEvery)*(1-DefaultJitter)) {
				t.Fatalf("probe %d came %v after the last: outside [3.5s, 5s]", i, d)
			}
		}
		back.Store(true)
		time.Sleep(DefaultEvery)
		synctest.Wait()
		if len(probes()) != 3 || ups.Load() != 1 || !tr.Is(Relay, Up) {
			t.Fatalf("after the return: %d probes, %d ups, state %v", len(probes()), ups.Load(), tr.Get(Relay).State)
		}
		if p.Running(Relay) {
			t.Fatal("the loop goes on after the target answered")
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		if len(probes()) != 3 {
			t.Fatalf("probed an up target: %d probes", len(probes()))
		}
		p.Stop()
	})
}

// TestProberPokeAndStop: a poke probes at once; a probe that finds nothing to probe ends the
// loop; Stop ends every loop; Watch before Start or after Stop does nothing.
func TestProberPokeAndStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := New(Config{})
		var n atomic.Int32
		gone := LAN("gone")
		p := NewProber(ProberConfig{Tracker: tr, Every: time.Hour,
			Probe: func(_ context.Context, target Target) bool {
				n.Add(1)
				if target == gone {
					return false
				}
				tr.Down(target)
				return true
			}})
		p.Watch(Relay)
		if p.Running(Relay) {
			t.Fatal("Watch before Start started a loop")
		}
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		p.Start(ctx)
		tr.Down(Relay)
		p.Watch(Relay)
		p.Poke(Relay)
		synctest.Wait()
		if n.Load() != 1 {
			t.Fatalf("%d probes after a poke, want 1", n.Load())
		}
		tr.Down(gone)
		p.Watch(gone)
		p.Poke(gone)
		synctest.Wait()
		if n.Load() != 2 || p.Running(gone) {
			t.Fatalf("nothing to probe: %d probes, running %v", n.Load(), p.Running(gone))
		}
		p.Stop()
		cancel()
		synctest.Wait()
		if p.Running(Relay) {
			t.Fatal("Stop left a loop running")
		}
		p.Watch(Relay)
		if p.Running(Relay) {
			t.Fatal("Watch after Stop started a loop")
		}
	})
}
