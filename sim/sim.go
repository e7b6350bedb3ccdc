package sim

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/internal/oracle"
	"github.com/agentmbx/agentmbx/soak"
)

// Config is one simulation run.
type Config struct {
	// Seed decides everything: the schedule, the faults, the keys, the message ids.
	Seed uint64
	// Hosts is the number of hosts (at least 2; default 3). The last one is relay-only: its
	// peers have no LAN address for it.
	Hosts int
	// Messages is the number of messages sent (default 12).
	Messages int
	// Events is the least number of scheduled events under faults (default 400).
	Events int
	// Trace, when set, receives the run's trace, one line per event.
	Trace io.Writer
	// StuckAfter is how long (real time) the driver waits for a running task to park or end
	// before it declares the run stuck (default 2 min).
	StuckAfter time.Duration
	// MaxBatch is the max_batch the relay announces (0: mbx.DefaultMaxBatch). A small one splits
	// a host's send into several pushes, whose answers can straddle a crash or a restore.
	MaxBatch int
	// NoMoves leaves out the schedule's reads and acks of received mail (Stats.Moves), which the
	// oracle's watch needs to see a copy go back: the schedule is then the one the seeds of
	// TestSimRegressions were found with.
	NoMoves bool
}

// SmallBatch is the MaxBatch of every third seed in TestSim (seed % 3 == 1).
const SmallBatch = 2

// BatchFor is the MaxBatch TestSim runs seed with: SmallBatch for every third seed, else the
// relay's default.
func BatchFor(seed uint64) int {
	if seed%3 == 1 {
		return SmallBatch
	}
	return 0
}

func (c *Config) defaults() {
	if c.Hosts < 2 {
		c.Hosts = 3
	}
	if c.Messages <= 0 {
		c.Messages = 12
	}
	if c.Events <= 0 {
		c.Events = 400
	}
	if c.StuckAfter <= 0 {
		c.StuckAfter = 2 * time.Minute
	}
}

// Result is what a run found.
type Result struct {
	// Hash is the trace's SHA-256: the same seed gives the same hash.
	Hash string
	// Tally is the soak oracle's count; Problems every oracle failure (none: the run passed).
	Tally    oracle.Tally
	Problems []string
	Stats    Stats
	// Tail is the end of the trace, for a failure's report.
	Tail []string
}

// OK reports whether the oracle found nothing.
func (r Result) OK() bool { return len(r.Problems) == 0 && r.Tally.OK() }

// Run runs one simulation in dir (an empty directory it may fill).
func Run(cfg Config, dir string) (Result, error) {
	cfg.defaults()
	w := newWorld(cfg, dir)
	defer w.close()
	topo := soak.Topology(cfg.Hosts)
	if err := w.setUp(topo); err != nil {
		return Result{}, err
	}
	w.faults = true
	for ; w.steps < cfg.Events || len(w.sent) < cfg.Messages; w.steps++ {
		if err := w.event(topo); err != nil {
			return w.result(), err
		}
	}
	if err := w.quiesce(); err != nil {
		return w.result(), err
	}
	tally, problems, err := w.check(topo)
	res := w.result()
	res.Tally, res.Problems = tally, problems
	return res, err
}

func (w *world) result() Result {
	w.stats.Events, w.stats.Messages = w.steps, len(w.sent)
	w.stats.SimTime = w.clock.Now().Sub(start)
	return Result{Hash: w.hashOf(), Stats: w.stats, Tail: append([]string(nil), w.tail...)}
}

// close stops whatever is still up (files are left for the caller's directory cleanup).
func (w *world) close() {
	for _, m := range append([]*message(nil), w.msgs...) {
		w.resume(m, reply{err: errNet})
	}
	for _, sh := range w.hosts {
		if sh.h != nil {
			sh.h.Close()
			sh.h = nil
		}
	}
	if w.relay != nil && w.relay.store != nil {
		w.relay.store.Close()
		w.relay.store, w.relay.srv = nil, nil
	}
}

// setUp starts the relay and the hosts, pairs every host with every other, pins the relay on
// each and enrols them, with a fault-free network.
func (w *world) setUp(topo []soak.Host) error {
	if err := w.newRelay(); err != nil {
		return err
	}
	for i, t := range topo {
		sh, err := w.newHost(i, t.Name, i < len(topo)-1)
		if err != nil {
			return err
		}
		w.hosts = append(w.hosts, sh)
	}
	if err := w.pairAll(topo); err != nil {
		return err
	}
	fp := w.relay.key.Fingerprint()
	for _, sh := range w.hosts {
		h := sh.h
		var err error
		w.run(sh.name, "relay-set", func(ctx context.Context) string {
			_, err = h.Relay().RelaySet(ctx, api.RelaySetRequest{URL: relayURL, Key: fp, AllowHTTP: true})
			return errNote(err)
		})
		if err != nil {
			return fmt.Errorf("sim: %s: relay set: %w", sh.name, err)
		}
		w.run(sh.name, "keep", func(ctx context.Context) string {
			err = h.Relay().Keep(ctx, false)
			return errNote(err)
		})
		if err != nil {
			return fmt.Errorf("sim: %s: enrol: %w", sh.name, err)
		}
	}
	return nil
}

// run runs one task to its end on a fault-free network.
func (w *world) run(node, kind string, fn func(ctx context.Context) string) {
	w.spawn(node, kind, fn)
	w.finish()
}

func errNote(err error) string {
	if err == nil {
		return "ok"
	}
	return "error: " + err.Error()
}

// ---- the schedule ----------------------------------------------------------------------------

type choice struct {
	weight float64
	name   string
	do     func() error
}

// event picks the next event with the seeded PRNG and runs it.
func (w *world) event(topo []soak.Host) error {
	var cs []choice
	add := func(weight float64, name string, do func() error) {
		cs = append(cs, choice{weight, name, do})
	}
	if len(w.sent) < w.cfg.Messages && len(w.downHosts()) < len(w.hosts) {
		add(4, "send", func() error { return w.send(topo) })
	}
	if !w.cfg.NoMoves && len(w.sent) > 0 {
		add(0.5, "move", w.move)
	}
	for _, sh := range w.hosts {
		if sh.h == nil {
			add(2, "restart "+sh.name, func() error { return w.restartHost(sh) })
			continue
		}
		w.stepChoices(sh, add)
		add(0.15, "crash "+sh.name, func() error { w.stats.HostCrashes++; return w.crashHost(sh) })
	}
	for _, m := range w.msgs {
		if m.served {
			add(3, "answer", func() error { w.deliver(m); return nil })
			add(0.4, "lose answer", func() error {
				w.stats.LostAnswers++
				w.resume(m, reply{err: errNet})
				return nil
			})
			continue
		}
		add(3, "deliver", func() error { w.deliver(m); return nil })
		add(0.3, "lose request", func() error {
			w.stats.LostRequests++
			w.resume(m, reply{err: errNet})
			return nil
		})
		add(0.2, "duplicate request", func() error {
			w.stats.Duplicated++
			if w.serve(m) {
				w.tracef("served (first copy) %s %d", m, m.code)
			}
			w.deliver(m)
			return nil
		})
	}
	add(1.5, "advance clock", func() error { w.advance(); return nil })
	r := w.relay
	switch {
	case r.srv == nil:
		add(2, "restart relay", w.startRelay)
	default:
		add(0.15, "crash relay", func() error { w.stats.RelayCrashes++; return w.crashRelay() })
		if r.backup == "" && len(w.sent) >= w.cfg.Messages/3 {
			add(0.3, "backup relay", w.backupRelay)
		}
		if r.backup != "" && w.stats.Restores == 0 && len(w.sent) >= 2*w.cfg.Messages/3 {
			add(0.3, "restore relay", w.restoreRelay)
		}
	}
	total := 0.0
	for _, c := range cs {
		total += c.weight
	}
	x := w.rng.Float64() * total
	for _, c := range cs {
		if x < c.weight {
			return c.do()
		}
		x -= c.weight
	}
	return cs[len(cs)-1].do()
}

// stepChoices offers the steps a host's daemon runs: those not already running on it.
func (w *world) stepChoices(sh *simHost, add func(float64, string, func() error)) {
	h := sh.h
	steps := []struct {
		kind   string
		weight float64
		fn     func(ctx context.Context) string
	}{
		{"pass", 2, func(ctx context.Context) string {
			n, err := h.Steps().Outbox(ctx)
			return fmt.Sprintf("rows=%d %s", n, errNote(err))
		}},
		{"pull", 1.5, func(ctx context.Context) string {
			st, err := h.Relay().PullStep(ctx)
			return fmt.Sprintf("pulled=%d acked=%d reset=%d %s", st.Pulled, st.Acked, st.Reset, errNote(err))
		}},
		{"keep", 0.3, func(ctx context.Context) string { return errNote(h.Relay().Keep(ctx, false)) }},
		{"sweep", 0.2, func(ctx context.Context) string {
			n, err := h.Steps().Sweep(ctx)
			return fmt.Sprintf("ended=%d %s", n, errNote(err))
		}},
	}
	for _, s := range steps {
		if !w.busy(sh.name, s.kind) {
			add(s.weight, s.kind+" "+sh.name, func() error { w.spawn(sh.name, s.kind, s.fn); return nil })
		}
	}
}

// send sends one message of the soak's traffic model from a host that is up.
func (w *world) send(topo []soak.Host) error {
	from, agent, to := soak.Pick(w.rng, topo)
	sh := w.hosts[from]
	if sh.h == nil {
		w.tracef("send skipped: %s is down", sh.name)
		return nil
	}
	n := len(w.sent) + 1
	res, err := sh.h.Send(context.Background(), api.SendRequest{From: agent, To: []string{to},
		Subject: fmt.Sprintf("m%d", n), Body: fmt.Sprintf("message %d of seed %d", n, w.cfg.Seed)})
	if err != nil {
		return fmt.Errorf("sim: %s: send from %s to %s: %w", sh.name, agent, to, err)
	}
	w.sent = append(w.sent, oracle.Sent{ID: res.ID, From: oracle.Mailbox{Host: sh.name, Agent: agent},
		To: soak.Recipients(topo, sh.name, agent, to)})
	w.tracef("send %s %s@%s → %s hosts=%v", res.ID, agent, sh.name, to, res.Hosts)
	return nil
}

// move has an agent read or ack (one in three) a message in its mailbox: a sent message's
// recipient, on a host that is up. The watch then requires the copy never to be seen unread
// again (a re-delivery would put it back to delivered).
func (w *world) move() error {
	s := w.sent[w.rng.IntN(len(w.sent))]
	m := s.To[w.rng.IntN(len(s.To))]
	ack := w.rng.IntN(3) == 0
	var sh *simHost
	for _, h := range w.hosts {
		if h.name == m.Host {
			sh = h
		}
	}
	if sh.h == nil {
		w.tracef("move skipped: %s is down", m.Host)
		return nil
	}
	ctx := context.Background()
	svc := sh.h.Service()
	msgs, err := svc.Inbox(ctx, m.Agent, true)
	if err != nil {
		return fmt.Errorf("sim: inbox of %s: %w", m, err)
	}
	w.watch.Look(map[oracle.Mailbox][]oracle.Copy{m: soak.Copies(msgs)})
	if len(msgs) == 0 {
		w.tracef("move skipped: %s is empty", m)
		return nil
	}
	id := msgs[w.rng.IntN(len(msgs))].ID
	var got api.Message
	if ack {
		got, err = svc.Ack(ctx, api.AckRequest{Agent: m.Agent, ID: id})
	} else {
		got, err = svc.Read(ctx, api.ReadRequest{Agent: m.Agent, ID: id})
	}
	if err != nil {
		return fmt.Errorf("sim: %s: read or ack %s: %w", m, id, err)
	}
	w.watch.Moved(m, id, got.State)
	w.stats.Moves++
	w.tracef("move %s of %s: %s", id, m, got.State)
	return nil
}

// advance moves the clock: mostly by a little, sometimes by minutes.
func (w *world) advance() {
	var d time.Duration
	switch x := w.rng.IntN(100); {
	case x < 70:
		d = time.Duration(w.rng.IntN(3000)) * time.Millisecond
	case x < 95:
		d = 5*time.Second + time.Duration(w.rng.IntN(115))*time.Second
	default:
		d = 2*time.Minute + time.Duration(w.rng.IntN(18))*time.Minute
	}
	w.clock.Advance(d)
	w.tracef("clock +%s", d)
}

func (w *world) restartHost(sh *simHost) error {
	if err := w.startHost(sh); err != nil {
		return err
	}
	sh.h.Relay().ReleaseHeld()
	return nil
}

// ---- quiescence ------------------------------------------------------------------------------

// quiesce turns the faults off, lets every parked task end, starts every node that is down and
// then runs every host's steps, moving the clock on, until every outbox row is settled.
func (w *world) quiesce() error {
	w.faults = false
	w.tracef("quiesce")
	w.finish()
	if w.relay.srv == nil {
		if err := w.startRelay(); err != nil {
			return err
		}
	}
	for _, sh := range w.hosts {
		if sh.h == nil {
			if err := w.restartHost(sh); err != nil {
				return err
			}
		}
	}
	idle := 0
	for round := 0; round < 400; round++ {
		moved := 0
		for _, sh := range w.hosts {
			moved += w.rounds(sh)
		}
		left, err := w.unsettled()
		if err != nil {
			return err
		}
		if left == 0 && moved == 0 {
			if idle++; idle >= 2 {
				return nil
			}
		} else {
			idle = 0
		}
		if moved > 0 {
			w.clock.Advance(time.Second)
		} else {
			w.clock.Advance(2 * time.Minute)
		}
		w.steps++
	}
	left, err := w.unsettled()
	w.tracef("quiescence not reached: %d rows unsettled (%v)", left, err)
	return nil // the oracle reports the rows
}

// rounds runs a host's keep, pass, pulls (until a page is empty) and sweep on a fault-free
// network, and returns how many rows and items they moved.
func (w *world) rounds(sh *simHost) int {
	h := sh.h
	moved := 0
	w.run(sh.name, "keep", func(ctx context.Context) string { return errNote(h.Relay().Keep(ctx, false)) })
	w.run(sh.name, "pass", func(ctx context.Context) string {
		n, err := h.Steps().Outbox(ctx)
		moved += n
		return fmt.Sprintf("rows=%d %s", n, errNote(err))
	})
	for range 50 {
		pulled := 0
		w.run(sh.name, "pull", func(ctx context.Context) string {
			st, err := h.Relay().PullStep(ctx)
			pulled = st.Pulled
			return fmt.Sprintf("pulled=%d acked=%d reset=%d %s", st.Pulled, st.Acked, st.Reset, errNote(err))
		})
		moved += pulled
		if pulled == 0 {
			break
		}
	}
	w.run(sh.name, "sweep", func(ctx context.Context) string {
		n, err := h.Steps().Sweep(ctx)
		moved += n
		return fmt.Sprintf("ended=%d %s", n, errNote(err))
	})
	return moved
}
