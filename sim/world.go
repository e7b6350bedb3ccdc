package sim

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/host"
	"github.com/agentmbx/agentmbx/internal/oracle"
	"github.com/agentmbx/agentmbx/internal/testkit"
	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/relayclient"
	"github.com/agentmbx/agentmbx/relayserver"
	"github.com/agentmbx/agentmbx/relayserver/sqlitestore"
	"github.com/agentmbx/agentmbx/soak"
)

// The world: the relay and the hosts, their stores in a directory of their own, the clock, the
// network's pending messages and the tasks (steps of a node) that are parked on them.

const (
	relayNode = "relay"
	relayURL  = "http://relay.sim"
	lanPort   = 7373
)

// start is the simulated clock's starting time.
var start = time.Date(2026, 10, 2, 10, 0, 0, 0, time.UTC)

// task is one step of a node (an outbox pass, a pull, ...) running on a goroutine of its own,
// parked whenever it waits for the network. Only one task runs at a time.
type task struct {
	id   int
	node string
	kind string
	dead bool // its node crashed: its requests fail at once, it runs on to its end
}

// yieldMsg is what the running task tells the driver: it parked on msg, or it ended (note).
type yieldMsg struct {
	t    *task
	msg  *message
	done bool
	note string
}

type simHost struct {
	name string
	idx  int
	dir  string
	lan  bool // reachable over the LAN (its peers have its address)
	key  string
	h    *host.Host // nil while down
	life int        // incarnation: seeds the randomness of each start
}

type simRelay struct {
	dir    string
	key    mbx.SigningKey
	store  *sqlitestore.Store
	srv    *relayserver.Server // nil while down
	backup string              // the backup's path once taken
	life   int
}

// world is one simulation run.
type world struct {
	cfg   Config
	rng   *rand.Rand
	clock *testkit.Clock
	dir   string
	log   *slog.Logger

	hosts []*simHost
	relay *simRelay

	yield   chan yieldMsg
	cur     *task
	tasks   []*task
	msgs    []*message // pending: requests not yet served, answers not yet delivered
	nextMsg int
	nextTk  int
	faults  bool

	trace    hash.Hash
	steps    int
	tail     []string // the last trace lines, for a failure's report
	sent     []oracle.Sent
	watch    oracle.Watch // every copy's furthest state: the reads and acks, and each look
	stats    Stats
	seqs     seqOracle
	problems []string
}

// Stats counts what a run did.
type Stats struct {
	Events, Messages, LostRequests, LostAnswers, Duplicated, HostCrashes, RelayCrashes, Restores, Moves int
	SimTime                                                                                             time.Duration
}

func newWorld(cfg Config, dir string) *world {
	w := &world{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, 0x5eed)), clock: testkit.NewClock(start),
		dir: dir, yield: make(chan yieldMsg), trace: sha256.New(), seqs: newSeqOracle()}
	w.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	if os.Getenv("SIM_LOG") != "" {
		w.log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return w
}

// rnd is a deterministic randomness source for one purpose of one node's incarnation.
func (w *world) rnd(purpose string, n int) io.Reader {
	sum := sha256.Sum256(fmt.Appendf(nil, "%d/%s/%d", w.cfg.Seed, purpose, n))
	return rand.NewChaCha8(sum)
}

func (w *world) tracef(format string, args ...any) {
	line := fmt.Sprintf("%d %s ", w.steps, w.clock.Now().Sub(start)) + fmt.Sprintf(format, args...)
	w.trace.Write([]byte(line))
	w.trace.Write([]byte{'\n'})
	if w.cfg.Trace != nil {
		fmt.Fprintln(w.cfg.Trace, line)
	}
	w.tail = append(w.tail, line)
	if len(w.tail) > 60 {
		w.tail = w.tail[1:]
	}
}

func (w *world) problemf(format string, args ...any) {
	p := fmt.Sprintf(format, args...)
	w.tracef("PROBLEM %s", p)
	if len(w.problems) < 30 {
		w.problems = append(w.problems, p)
	}
}

func (w *world) ip(node string) string {
	for _, h := range w.hosts {
		if h.name == node {
			return fmt.Sprintf("10.0.0.%d", h.idx+1)
		}
	}
	return "10.0.9.9"
}

// route names the node at a URL's host:port.
func (w *world) route(hostport string) (string, bool) {
	if hostport == "relay.sim" {
		return relayNode, true
	}
	for _, h := range w.hosts {
		if hostport == fmt.Sprintf("%s:%d", w.ip(h.name), lanPort) {
			return h.name, true
		}
	}
	return "", false
}

// handler is the HTTP handler of a node, nil while it is down.
func (w *world) handler(node string) http.Handler {
	if node == relayNode {
		if w.relay.srv == nil {
			return nil
		}
		return w.relay.srv
	}
	h := w.host(node)
	if h == nil || h.h == nil {
		return nil
	}
	return h.h.LANMux()
}

func (w *world) host(name string) *simHost {
	for _, h := range w.hosts {
		if h.name == name {
			return h
		}
	}
	return nil
}

func (w *world) client(node string) *http.Client {
	return &http.Client{Transport: &transport{w: w, from: node},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// ---- the relay -------------------------------------------------------------------------------

func (w *world) newRelay() error {
	key, err := mbx.GenerateSigningKey(w.rnd("relay-key", 0))
	if err != nil {
		return err
	}
	w.relay = &simRelay{dir: filepath.Join(w.dir, "relay"), key: key}
	return w.startRelay()
}

func (w *world) startRelay() error {
	r := w.relay
	r.life++
	ctx := context.Background()
	st, err := sqlitestore.Open(ctx, r.dir, &sqlitestore.Options{Rand: w.rnd("relay-store", r.life), Ballast: -1,
		Logger: w.log, FreeSpace: func(string) (int64, bool) { return 1 << 40, true }})
	if err != nil {
		return fmt.Errorf("sim: open the relay store: %w", err)
	}
	// The relay announces a push budget hosts never reach: the hosts' push pacer (relaylink.Pacer)
	// waits on the real clock, which the simulation does not drive.
	lim := mbx.DefaultLimits()
	lim.PushesPerMinute = 1 << 30
	if w.cfg.MaxBatch > 0 {
		lim.MaxBatch = w.cfg.MaxBatch
	}
	srv, err := relayserver.New(ctx, st, relayserver.Options{Key: r.key, Version: "sim", Clock: w.clock.Now, Limits: lim,
		Rand: w.rnd("relay", r.life), Logger: w.log, EnrolCallsPerMinute: -1, PushesPerMinute: -1,
		NewEnrolmentsPerDay: -1, MaxWait: -1})
	if err != nil {
		st.Close()
		return fmt.Errorf("sim: start the relay: %w", err)
	}
	r.store, r.srv = st, srv
	w.tracef("relay up epoch=%s", srv.Epoch())
	return nil
}

// crashRelay stops the relay: the server's memory (challenges, rate tables) is gone, the store
// keeps what it committed. Answers on their way back from it are lost.
func (w *world) crashRelay() error {
	r := w.relay
	if r.srv == nil {
		return nil
	}
	r.srv = nil
	err := r.store.Close()
	r.store = nil
	w.tracef("relay crash")
	w.loseAnswersFrom(relayNode)
	if err != nil {
		return fmt.Errorf("sim: close the relay store: %w", err)
	}
	return nil
}

// backupRelay takes an online backup of the relay's store.
func (w *world) backupRelay() error {
	r := w.relay
	r.backup = filepath.Join(w.dir, "relay-backup.db")
	m, err := sqlitestore.Backup(context.Background(), r.dir, r.backup)
	if err != nil {
		return fmt.Errorf("sim: backup: %w", err)
	}
	w.tracef("relay backup epoch=%s", m.Epoch)
	return nil
}

// restoreRelay stops the relay, restores its store from the backup (a new epoch) and starts it.
func (w *world) restoreRelay() error {
	if err := w.crashRelay(); err != nil {
		return err
	}
	res, err := sqlitestore.Restore(context.Background(), w.relay.dir, w.relay.backup,
		&sqlitestore.RestoreOptions{Rand: w.rnd("restore", w.relay.life), Now: w.clock.Now})
	if err != nil {
		return fmt.Errorf("sim: restore: %w", err)
	}
	w.tracef("relay restored epoch=%s previous=%s", res.Epoch, res.Previous)
	w.stats.Restores++
	return w.startRelay()
}

// ---- the hosts -------------------------------------------------------------------------------

func (w *world) newHost(idx int, name string, lan bool) (*simHost, error) {
	sh := &simHost{name: name, idx: idx, dir: filepath.Join(w.dir, name), lan: lan}
	if err := host.Init(sh.dir, host.InitOptions{Host: name, Listen: fmt.Sprintf("%s:%d", w.ip(name), lanPort),
		Rand: w.rnd("init-"+name, 0), Clock: w.clock.Now}); err != nil {
		return nil, err
	}
	if err := w.startHost(sh); err != nil {
		return nil, err
	}
	sh.key = sh.h.Key().PublicKey()
	return sh, nil
}

func (w *world) startHost(sh *simHost) error {
	sh.life++
	jit := rand.New(rand.NewPCG(w.cfg.Seed, uint64(sh.idx)<<32|uint64(sh.life)))
	h, err := host.Open(sh.dir, &host.Options{Clock: w.clock.Now, Rand: w.rnd("host-"+sh.name, sh.life),
		Jitter: jit.Float64, Logger: w.log.With("host", sh.name), LockTimeout: 5 * time.Second,
		HTTPClient: w.client(sh.name), Serial: true, NoSync: true,
		RelayClient: relayclient.Options{HTTPClient: w.client(sh.name), RetryWait: func(int) time.Duration { return 0 }}})
	if err != nil {
		return fmt.Errorf("sim: open %s: %w", sh.name, err)
	}
	sh.h = h
	w.tracef("%s up", sh.name)
	return nil
}

// crashHost stops a host: its memory is gone, its store keeps what it committed. Its parked
// tasks get errors and run to their end against the closed store; answers on their way to it and
// from it are lost.
func (w *world) crashHost(sh *simHost) error {
	if sh.h == nil {
		return nil
	}
	err := sh.h.Close()
	sh.h = nil
	w.tracef("%s crash", sh.name)
	for _, tk := range w.tasks {
		if tk.node == sh.name {
			tk.dead = true
		}
	}
	w.loseAnswersFrom(sh.name)
	for _, m := range w.pendingOf(sh.name) {
		w.resume(m, reply{err: errNet})
	}
	if err != nil {
		return fmt.Errorf("sim: close %s: %w", sh.name, err)
	}
	return nil
}

// pendingOf lists the pending messages of a node's tasks.
func (w *world) pendingOf(node string) []*message {
	var out []*message
	for _, m := range w.msgs {
		if m.task.node == node {
			out = append(out, m)
		}
	}
	return out
}

// loseAnswersFrom fails the answers a node had served and not yet delivered (its connections are
// gone with it).
func (w *world) loseAnswersFrom(node string) {
	for _, m := range append([]*message(nil), w.msgs...) {
		if m.to == node && m.served && !m.task.dead {
			w.resume(m, reply{err: errNet})
		}
	}
}

// pairAll pins every host to every other (the relay-only ones without an address) and adds the
// agents of the soak's topology.
func (w *world) pairAll(topo []soak.Host) error {
	ctx := context.Background()
	for i, sh := range w.hosts {
		for _, a := range topo[i].Agents {
			if _, err := sh.h.AddAgent(ctx, api.Agent{Name: a.Name, Role: a.Role}); err != nil {
				return err
			}
		}
		for _, o := range w.hosts {
			if o == sh {
				continue
			}
			rec := host.PeerRecord{Host: o.name, HostPubkey: o.key, EncPub: o.h.EncKey().PublicKey(), AddedAt: w.clock.Now()}
			if o.lan {
				rec.Addr = fmt.Sprintf("%s:%d", w.ip(o.name), lanPort)
			}
			if err := sh.h.PinPeer(rec); err != nil {
				return err
			}
		}
	}
	return nil
}

// ---- tasks -----------------------------------------------------------------------------------

// spawn starts a task and runs it until it parks or ends.
func (w *world) spawn(node, kind string, fn func(ctx context.Context) string) *task {
	w.nextTk++
	tk := &task{id: w.nextTk, node: node, kind: kind}
	w.tasks = append(w.tasks, tk)
	w.tracef("start %s %s t%d", node, kind, tk.id)
	w.cur = tk
	go func() {
		note := fn(context.Background())
		w.yield <- yieldMsg{t: tk, done: true, note: note}
	}()
	w.wait(tk)
	return tk
}

// wait waits for the running task to park or end. A task that does neither blocks on something
// other than the network (a lock held across a request): the run fails with its seed.
func (w *world) wait(tk *task) {
	var y yieldMsg
	select {
	case y = <-w.yield:
	case <-time.After(w.cfg.StuckAfter):
		panic(fmt.Sprintf("sim: seed %d: task t%d (%s %s) neither parked nor ended in %s", w.cfg.Seed, tk.id, tk.node, tk.kind, w.cfg.StuckAfter))
	}
	w.cur = nil
	if y.t != tk {
		panic(fmt.Sprintf("sim: seed %d: task t%d yielded while t%d ran", w.cfg.Seed, y.t.id, tk.id))
	}
	if y.done {
		w.tracef("end t%d %s %s: %s", tk.id, tk.node, tk.kind, y.note)
		for i, t := range w.tasks {
			if t == tk {
				w.tasks = append(w.tasks[:i], w.tasks[i+1:]...)
				break
			}
		}
		return
	}
	w.msgs = append(w.msgs, y.msg)
	w.tracef("req %s len=%d", y.msg, len(y.msg.body))
}

// resume hands a parked task its reply and runs it until it parks again or ends.
func (w *world) resume(m *message, r reply) {
	for i, p := range w.msgs {
		if p == m {
			w.msgs = append(w.msgs[:i], w.msgs[i+1:]...)
			break
		}
	}
	if r.err != nil {
		w.tracef("fail %s: %v", m, r.err)
	} else {
		sum := sha256.Sum256(m.rbody)
		w.tracef("answer %s %d %x", m, m.code, sum[:8])
	}
	w.cur = m.task
	m.reply <- r
	w.wait(m.task)
}

// busy reports whether a node has a task of kind running.
func (w *world) busy(node, kind string) bool {
	for _, t := range w.tasks {
		if t.node == node && t.kind == kind {
			return true
		}
	}
	return false
}

// finish runs every task to its end with a fault-free network: oldest message first.
func (w *world) finish() {
	for len(w.msgs) > 0 {
		w.deliver(w.msgs[0])
	}
}

// deliver serves a pending request, or delivers a served answer; a request to a node that is
// down fails.
func (w *world) deliver(m *message) {
	if m.served {
		w.resume(m, reply{resp: m.answer()})
		return
	}
	if !w.serve(m) {
		w.resume(m, reply{err: fmt.Errorf("sim: %s: connection refused", m.to)})
		return
	}
	w.tracef("served %s %d", m, m.code)
}

// hashOf is the run's trace hash.
func (w *world) hashOf() string {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(w.steps))
	w.trace.Write(b[:])
	return fmt.Sprintf("%x", w.trace.Sum(nil))
}

func (w *world) downHosts() []string {
	var out []string
	for _, h := range w.hosts {
		if h.h == nil {
			out = append(out, h.name)
		}
	}
	return out
}
