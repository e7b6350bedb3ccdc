//go:build soak

package soak

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/demo"
	"github.com/agentmbx/agentmbx/host/mailstore"
	"github.com/agentmbx/agentmbx/internal/failpoint"
	"github.com/agentmbx/agentmbx/internal/oracle"
)

// config is one soak run, from the environment (see docs/development.md "Soak", make soak).
type config struct {
	seed       uint64
	messages   int
	relayKills int
	hostKills  int // per host
	faults     Faults
	quiet      time.Duration // how long to wait for quiescence at the end
	keep       bool
	daemonEnv  []string // added to every daemon's environment (the oracle's self-test)
}

func envInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		t.Fatalf("%s=%q: want a count", name, v)
	}
	return n
}

func envFloat(t *testing.T, name string, def float64) float64 {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f < 0 || f > 0.9 {
		t.Fatalf("%s=%q: want a rate in [0, 0.9]", name, v)
	}
	return f
}

func loadConfig(t *testing.T) config {
	c := config{
		messages:   envInt(t, "SOAK_MESSAGES", 150),
		relayKills: envInt(t, "SOAK_RELAY_KILLS", 4),
		hostKills:  envInt(t, "SOAK_HOST_KILLS", 1),
		faults: Faults{
			LoseResponse: envFloat(t, "SOAK_LOSE", 0.1),
			Reset:        envFloat(t, "SOAK_RESET", 0.05),
			MaxLatency:   time.Duration(envInt(t, "SOAK_LATENCY_MS", 40)) * time.Millisecond,
		},
		quiet: time.Duration(envInt(t, "SOAK_QUIET_S", 600)) * time.Second,
		keep:  os.Getenv("SOAK_KEEP") != "",
	}
	if v := os.Getenv("SOAK_SEED"); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("SOAK_SEED=%q: want a number", v)
		}
		c.seed = s
	} else {
		c.seed = rand.Uint64() % 1_000_000_000
	}
	if c.messages < 4 {
		t.Fatalf("SOAK_MESSAGES=%d: want at least 4", c.messages)
	}
	return c
}

// binary is SOAK_BIN, or agentmbx built for this run (without the race detector: the soak is
// about the processes' behaviour under faults, and a race build is several times slower).
func binary(t *testing.T, dir string) string {
	if b := os.Getenv("SOAK_BIN"); b != "" {
		return b
	}
	bin := filepath.Join(dir, "agentmbx")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/agentmbx/agentmbx/cmd/agentmbx").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// soakHost is one host of the run.
type soakHost struct {
	Host
	home   string
	listen string // the daemon's fixed LAN address
	relay  string // the relay URL it pins (h3: the proxy's)
	daemon *demo.Proc
	kills  int
}

type soak struct {
	t     *testing.T
	cfg   config
	kit   *demo.Kit
	dir   string
	rng   *rand.Rand
	key   string // MBX_RELAY_KEY, the same for every relay start
	fp    string
	addr  string // the relay's fixed address
	relay *demo.Proc
	proxy *Proxy
	hosts []*soakHost
	sent  []oracle.Sent
	// watch sees every copy's state at each look, and the reads and acks the soak made.
	watch oracle.Watch
	// moves draws the reads and acks, apart from rng so that a seed's traffic and faults stay
	// what they were before the soak read its mail.
	moves *rand.Rand

	relayKills, hostKills, restores int
	backup                          string
	pinned                          []string // the mail that waited for h2 in the backup
	oldEpoch                        string   // the epoch h1 knew before the restore
}

// freeAddr is a loopback address free a moment ago (the relay and the daemons keep theirs
// across restarts, as a real deployment's do).
func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// The soak: one relay and three hosts as real processes, all pairwise paired, h2 and h3
// relay-only (their cards carry no LAN address), h3 behind the fault proxy. Seeded traffic and
// faults; then the oracle. SOAK_SEED replays the same traffic and fault schedule (process
// timing is the machine's).
func TestSoak(t *testing.T) {
	cfg := loadConfig(t)
	tally, s := runSoak(t, cfg)
	if !tally.OK() {
		t.Fatalf("seed %d: mail lost or duplicated:\n%s", cfg.seed, strings.Join(tally.Problems, "\n"))
	}
	s.faultsHappened()
}

// TestSoakOracleSelfTest runs a short soak whose daemons skip the receiver's dedup (the
// failpoint mailstore.FailSkipDedup): the restore hands h2 mail it already had (see
// backupWithMailWaiting), so the oracle must count deliveries beyond the first, and see the copy
// the soak had read go back to unread. An oracle that counts rows would pass this run.
func TestSoakOracleSelfTest(t *testing.T) {
	cfg := loadConfig(t)
	cfg.messages, cfg.relayKills, cfg.hostKills = 12, 0, 0
	cfg.faults = Faults{}
	cfg.quiet = 3 * time.Minute
	cfg.daemonEnv = []string{failpoint.Env + "=" + mailstore.FailSkipDedup + "=" + failpoint.Error.String()}
	tally, _ := runSoak(t, cfg)
	if tally.Duplicated < 1 || tally.WentBack < 1 || tally.OK() {
		t.Fatalf("with the dedup skipped, the oracle saw duplicated=%d went_back=%d (want both at least 1):\n%s",
			tally.Duplicated, tally.WentBack, strings.Join(tally.Problems, "\n"))
	}
	t.Logf("self-test: the oracle saw duplicated=%d went_back=%d", tally.Duplicated, tally.WentBack)
}

// runSoak runs one soak and returns the oracle's final count.
func runSoak(t *testing.T, cfg config) (oracle.Tally, *soak) {
	start := time.Now()
	dir, err := os.MkdirTemp("", "mbxsoak")
	if err != nil {
		t.Fatal(err)
	}
	s := &soak{t: t, cfg: cfg, dir: dir, rng: rand.New(rand.NewPCG(cfg.seed, 17)), moves: rand.New(rand.NewPCG(cfg.seed, 23))}
	s.kit = demo.NewKit(binary(t, dir))
	t.Cleanup(func() {
		s.kit.KillAll()
		if s.proxy != nil {
			s.proxy.Close()
		}
		if t.Failed() || cfg.keep {
			s.kit.Logs(dir)
			t.Logf("soak: seed=%d: directory kept at %s (relay store, host homes, *.log)", cfg.seed, dir)
			return
		}
		os.RemoveAll(dir)
	})
	t.Logf("soak: seed=%d messages=%d relay_kills=%d host_kills=%d per host", cfg.seed, cfg.messages, cfg.relayKills, cfg.hostKills)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Hour)
	defer cancel()

	s.setUp(ctx)
	s.traffic(ctx)
	tally := s.quiesce(ctx)
	line := Line(cfg.seed, tally, s.relayKills, s.hostKills, s.proxy.Lost(), s.restores, time.Since(start).Seconds())
	fmt.Println(line)
	return tally, s
}

// faultsHappened fails the run unless the faults it planned happened: every relay and host
// kill, some lost responses (when the proxy loses any), and the restore, after which every host
// pulled again from the start of the new epoch.
func (s *soak) faultsHappened() {
	ctx := context.Background()
	if s.relayKills != s.cfg.relayKills {
		s.t.Errorf("seed %d: %d relay kills, %d planned", s.cfg.seed, s.relayKills, s.cfg.relayKills)
	}
	if want := s.cfg.hostKills * len(s.hosts); s.hostKills != want {
		s.t.Errorf("seed %d: %d host kills, %d planned", s.cfg.seed, s.hostKills, want)
	}
	if s.cfg.faults.LoseResponse > 0 && s.proxy.Lost() == 0 {
		s.t.Errorf("seed %d: the proxy lost no response (rate %.2f)", s.cfg.seed, s.cfg.faults.LoseResponse)
	}
	if s.restores != 1 {
		s.t.Errorf("seed %d: %d restores, 1 planned", s.cfg.seed, s.restores)
	}
	for _, h := range s.hosts {
		st, err := s.relayStatus(ctx, h)
		if err != nil {
			s.t.Fatalf("seed %d: relay status of %s: %v", s.cfg.seed, h.Name, err)
		}
		if st.Resets < 1 {
			s.t.Errorf("seed %d: %s never reset its receive position (the restore's new epoch was not pulled from its start)", s.cfg.seed, h.Name)
		}
	}
	if s.pinned == nil {
		s.t.Errorf("seed %d: no mail waited for h2 at the backup", s.cfg.seed)
	}
}

func (s *soak) must(ctx context.Context, args ...string) string {
	s.t.Helper()
	out, err := s.kit.Must(ctx, args...)
	if err != nil {
		s.t.Fatalf("seed %d: %v", s.cfg.seed, err)
	}
	return out
}

// setUp starts the relay and the proxy, creates and pairs the hosts, pins the relay and starts
// the daemons.
func (s *soak) setUp(ctx context.Context) {
	stdout, stderr, code, err := s.kit.Run(ctx, "relay", "keygen")
	if err != nil || code != 0 {
		s.t.Fatalf("relay keygen: exit %d %v %s", code, err, stderr)
	}
	s.key, s.fp = strings.TrimSpace(stdout), demo.Fingerprint(stderr)
	s.addr = freeAddr(s.t)
	s.startRelay(ctx)
	s.proxy, err = StartProxy(s.addr, s.cfg.seed, s.cfg.faults)
	if err != nil {
		s.t.Fatal(err)
	}
	for i, h := range Topology(3) {
		sh := &soakHost{Host: h, home: filepath.Join(s.dir, h.Name), listen: freeAddr(s.t), relay: "http://" + s.addr}
		if i == 2 {
			sh.relay = "http://" + s.proxy.Addr()
		}
		s.must(ctx, "init", "--home", sh.home, "--host", h.Name, "--listen", sh.listen)
		for _, a := range h.Agents {
			args := []string{"agents", "add", a.Name, "--home", sh.home}
			if a.Role != "" {
				args = append(args, "--role", a.Role)
			}
			s.must(ctx, args...)
		}
		s.hosts = append(s.hosts, sh)
	}
	for i, from := range s.hosts {
		args := []string{"id", "--card", "--home", from.home}
		if i == 0 { // h1 is reachable on the LAN; h2 and h3 are relay-only
			args = append(args, "--addr", from.listen)
		}
		card := s.must(ctx, args...)
		for _, to := range s.hosts {
			if to != from {
				if _, err := s.kit.MustIn(ctx, card, "peers", "add", "-", "--yes", "--home", to.home); err != nil {
					s.t.Fatal(err)
				}
			}
		}
	}
	for _, h := range s.hosts {
		s.must(ctx, "relay", "set", h.relay, "--key", s.fp, "--home", h.home)
		s.startDaemon(ctx, h)
	}
	for _, h := range s.hosts {
		s.waitEnrolled(ctx, h, "")
	}
}

// startRelay runs `relay serve` on the relay's address with the one key, and checks it
// announces that key.
func (s *soak) startRelay(ctx context.Context) {
	addrFile := filepath.Join(s.dir, "relay.addr")
	os.Remove(addrFile)
	p, err := s.kit.Start("relay", []string{"MBX_RELAY_KEY=" + s.key},
		"relay", "serve", "--store-dir", filepath.Join(s.dir, "relay"), "--listen", s.addr, "--addr-file", addrFile)
	if err != nil {
		s.t.Fatal(err)
	}
	if _, err := demo.WaitAddr(ctx, p, addrFile); err != nil {
		s.t.Fatalf("seed %d: relay: %v", s.cfg.seed, err)
	}
	if fp := demo.Fingerprint(p.Log()); fp != s.fp {
		s.t.Fatalf("seed %d: the relay came back with key %q, want %q", s.cfg.seed, fp, s.fp)
	}
	s.relay = p
}

func (s *soak) startDaemon(ctx context.Context, h *soakHost) {
	addrFile := h.home + ".addr"
	os.Remove(addrFile)
	p, err := s.kit.Start(h.Name, s.cfg.daemonEnv, "daemon", "--home", h.home, "--listen", h.listen, "--tick", "100ms", "--addr-file", addrFile)
	if err != nil {
		s.t.Fatal(err)
	}
	if _, err := demo.WaitAddr(ctx, p, addrFile); err != nil {
		s.t.Fatalf("seed %d: daemon %s: %v", s.cfg.seed, h.Name, err)
	}
	h.daemon = p
}

// relayStatus reads `relay status --json` of h. It exits 1 while the last enrolment failed (the
// daemon retries it), and still prints the status then.
func (s *soak) relayStatus(ctx context.Context, h *soakHost) (api.RelayStatus, error) {
	out, stderr, code, err := s.kit.Run(ctx, "relay", "status", "--json", "--home", h.home)
	if err != nil {
		return api.RelayStatus{}, err
	}
	var st api.RelayStatus
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		return st, fmt.Errorf("relay status of %s: exit %d: %s: %w", h.Name, code, strings.TrimSpace(stderr), err)
	}
	return st, nil
}

// linked reports whether every host's daemon runs enrolled at the relay with its ad and
// allowlist published (the state the relay links settle in).
func (s *soak) linked(ctx context.Context) (bool, string, error) {
	for _, h := range s.hosts {
		st, err := s.relayStatus(ctx, h)
		if err != nil {
			return false, "", err
		}
		if !st.Enrolled || st.EncAdExp == "" || !st.SendersCurrent || !st.Daemon {
			return false, fmt.Sprintf("%s not linked: %+v", h.Name, st), nil
		}
	}
	return true, "", nil
}

func (s *soak) waitEnrolled(ctx context.Context, h *soakHost, notEpoch string) {
	err := demo.Poll(ctx, h.Name+"'s enrolment", func() (bool, string, error) {
		st, err := s.relayStatus(ctx, h)
		if err != nil {
			return false, err.Error(), nil // the relay may be down or answers lost: keep waiting
		}
		ok := st.Enrolled && st.EncAdExp != "" && st.SendersCurrent && st.Daemon && st.Epoch != notEpoch
		return ok, fmt.Sprintf("%+v", st), nil
	})
	if err != nil {
		s.t.Fatalf("seed %d: %v", s.cfg.seed, err)
	}
}

// event is a scheduled fault: at message index at.
type event struct {
	at   int
	kind string // relay-kill, relay-up, host-kill, host-up, backup, restore
	host int
}

// schedule draws the faults: relay kills (each followed by a restart 0-3 messages later),
// host kills likewise, one backup in the first half and the restore in the second.
func (s *soak) schedule() []event {
	n := s.cfg.messages
	var ev []event
	later := func(at int) int { return min(at+s.rng.IntN(4), n) }
	for range s.cfg.relayKills {
		at := 1 + s.rng.IntN(n-1)
		ev = append(ev, event{at: at, kind: "relay-kill"}, event{at: later(at), kind: "relay-up"})
	}
	for h := range s.hosts {
		for range s.cfg.hostKills {
			at := 1 + s.rng.IntN(n-1)
			ev = append(ev, event{at: at, kind: "host-kill", host: h}, event{at: later(at), kind: "host-up", host: h})
		}
	}
	ev = append(ev, event{at: n/4 + s.rng.IntN(n/4+1), kind: "backup"}, event{at: n/2 + 1 + s.rng.IntN(n/4+1), kind: "restore"})
	sort.SliceStable(ev, func(i, j int) bool { return ev[i].at < ev[j].at })
	return ev
}

// traffic sends the seeded messages, running the scheduled faults between them.
func (s *soak) traffic(ctx context.Context) {
	ev := s.schedule()
	topo := make([]Host, len(s.hosts))
	for i, h := range s.hosts {
		topo[i] = h.Host
	}
	for i := range s.cfg.messages + 1 {
		for len(ev) > 0 && ev[0].at == i {
			s.fault(ctx, ev[0])
			ev = ev[1:]
		}
		if i == s.cfg.messages {
			break
		}
		from, agent, to := Pick(s.rng, topo)
		s.send(ctx, s.hosts[from], agent, to, i)
		if s.moves.IntN(4) == 0 {
			s.move(ctx)
		}
	}
}

func (s *soak) send(ctx context.Context, h *soakHost, agent, to string, i int) {
	out := s.must(ctx, "send", "--home", h.home, "--as", agent, "--to", to, "--json",
		"--subject", fmt.Sprintf("soak %d #%d", s.cfg.seed, i), "-m", fmt.Sprintf("message %d of seed %d from %s@%s to %s", i, s.cfg.seed, agent, h.Name, to))
	var r api.SendResult
	if err := json.Unmarshal([]byte(out), &r); err != nil || r.ID == "" {
		s.t.Fatalf("seed %d: send printed %q: %v", s.cfg.seed, out, err)
	}
	want := Recipients(hostsOf(s.hosts), h.Name, agent, to)
	var local []string
	for _, m := range want {
		if m.Host == h.Name {
			local = append(local, m.String())
		}
	}
	got := slices.Clone(r.Local)
	slices.Sort(got)
	if !slices.Equal(got, local) {
		s.t.Fatalf("seed %d: send to %s from %s@%s delivered locally to %v, the model says %v", s.cfg.seed, to, agent, h.Name, got, local)
	}
	s.sent = append(s.sent, oracle.Sent{ID: r.ID, From: oracle.Mailbox{Host: h.Name, Agent: agent}, To: want})
}

func hostsOf(hs []*soakHost) []Host {
	out := make([]Host, len(hs))
	for i, h := range hs {
		out[i] = h.Host
	}
	return out
}

// fault runs one scheduled fault.
func (s *soak) fault(ctx context.Context, e event) {
	switch e.kind {
	case "relay-kill":
		s.ensureRelay(ctx)
		s.relay.Kill()
		s.relayKills++
	case "relay-up":
		s.ensureRelay(ctx)
	case "host-kill":
		h := s.hosts[e.host]
		if h.daemon.Exited() {
			s.startDaemon(ctx, h)
		}
		h.daemon.Kill()
		s.hostKills++
	case "host-up":
		if h := s.hosts[e.host]; h.daemon.Exited() {
			s.startDaemon(ctx, h)
		}
	case "backup":
		s.backupWithMailWaiting(ctx)
	case "restore":
		st, err := s.relayStatus(ctx, s.hosts[0])
		if err != nil || st.Epoch == "" {
			s.t.Fatalf("seed %d: h1's relay epoch before the restore: %q %v", s.cfg.seed, st.Epoch, err)
		}
		s.oldEpoch = st.Epoch
		if !s.relay.Exited() {
			if err := s.relay.Stop(30 * time.Second); err != nil {
				s.t.Fatalf("seed %d: stop the relay for the restore: %v", s.cfg.seed, err)
			}
		}
		s.must(ctx, "relay", "restore", s.backup, "--store-dir", filepath.Join(s.dir, "relay"))
		s.startRelay(ctx)
		s.restores++
	}
}

// backupWithMailWaiting takes the relay's online backup while mail for h2 waits in it: h2's
// daemon stopped, two messages from rev1@h1 to agents of h2 accepted by the relay, the backup,
// then h2 started again, and the first message read by its recipient once it is there. The
// restore later brings that mail back to the relay under a new epoch, so h2 pulls it a second
// time: its dedup must keep one delivery of each copy, and the read copy read (the self-test
// turns the dedup off and requires the oracle to see both). These messages are not drawn from
// the seed's PRNG, so a seed's traffic and faults stay what they were.
func (s *soak) backupWithMailWaiting(ctx context.Context) {
	s.ensureRelay(ctx)
	h1, h2 := s.hosts[0], s.hosts[1]
	if h1.daemon.Exited() {
		s.startDaemon(ctx, h1) // it pushes the mail (a host-up planned later finds it running)
	}
	if !h2.daemon.Exited() {
		if err := h2.daemon.Stop(30 * time.Second); err != nil {
			s.t.Fatalf("seed %d: stop h2 for the backup: %v", s.cfg.seed, err)
		}
	}
	var ids []string
	for _, to := range []string{"dev2@h2", "rev2@h2"} {
		s.send(ctx, h1, "rev1", to, len(s.sent))
		ids = append(ids, s.sent[len(s.sent)-1].ID)
	}
	err := demo.Poll(ctx, "the relay to accept the mail for h2", func() (bool, string, error) {
		rows, err := s.outboxRows(ctx)
		if err != nil {
			return false, err.Error(), nil
		}
		accepted := 0
		for _, r := range rows[h1.Name] {
			if r.Host == h2.Name && slices.Contains(ids, r.MsgID) && r.State == "relay-accepted" {
				accepted++
			}
		}
		return accepted == len(ids), fmt.Sprintf("%d of %d relay-accepted", accepted, len(ids)), nil
	})
	if err != nil {
		s.t.Fatalf("seed %d: %v", s.cfg.seed, err)
	}
	s.backup = filepath.Join(s.dir, "relay-backup.db")
	s.must(ctx, "relay", "backup", s.backup, "--store-dir", filepath.Join(s.dir, "relay"))
	s.startDaemon(ctx, h2)
	dev2 := oracle.Mailbox{Host: h2.Name, Agent: "dev2"}
	err = demo.Poll(ctx, "h2 to receive the mail that waited", func() (bool, string, error) {
		msgs, err := s.mailbox(ctx, h2, dev2)
		if err != nil {
			return false, err.Error(), nil
		}
		return slices.ContainsFunc(msgs, func(m api.Message) bool { return m.ID == ids[0] }), "", nil
	})
	if err != nil {
		s.t.Fatalf("seed %d: %v", s.cfg.seed, err)
	}
	s.moveOne(ctx, h2, dev2, ids[0], false)
	s.pinned = ids
}

func (s *soak) ensureRelay(ctx context.Context) {
	if s.relay.Exited() {
		s.startRelay(ctx)
	}
}

// quiesce brings every process up, waits until every message is where it should be and every
// outbox row settled (or cfg.quiet passes), and returns the oracle's final count.
func (s *soak) quiesce(ctx context.Context) oracle.Tally {
	s.ensureRelay(ctx)
	for _, h := range s.hosts {
		if h.daemon.Exited() {
			s.startDaemon(ctx, h)
		}
	}
	qctx, cancel := context.WithTimeout(ctx, s.cfg.quiet)
	defer cancel()
	var last oracle.Tally
	var unsettled []string
	err := demo.Poll(qctx, "quiescence", func() (bool, string, error) {
		boxes, alerts, err := s.mailboxes(qctx)
		if err != nil {
			return false, err.Error(), nil
		}
		last = oracle.Count(s.sent, boxes, &s.watch)
		if last.Duplicated > 0 || last.Misdelivered > 0 || last.WentBack > 0 || last.Uncounted > 0 {
			return true, "", nil // no waiting undoes a duplicate
		}
		unsettled, err = s.unsettled(qctx, alerts)
		if err != nil {
			return false, err.Error(), nil
		}
		if ok, why, err := s.linked(qctx); err != nil || !ok {
			return false, fmt.Sprint(why, err), nil
		}
		return last.Lost == 0 && len(unsettled) == 0, fmt.Sprintf("%d copies missing, %d rows unsettled", last.Lost, len(unsettled)), nil
	})
	if err != nil {
		s.t.Errorf("seed %d: no quiescence: %v", s.cfg.seed, err)
	}
	boxes, alerts, err := s.mailboxes(ctx)
	if err != nil {
		s.t.Fatalf("seed %d: read the mailboxes: %v", s.cfg.seed, err)
	}
	last = oracle.Count(s.sent, boxes, &s.watch)
	if unsettled, err = s.unsettled(ctx, alerts); err != nil {
		s.t.Fatalf("seed %d: read the outboxes: %v", s.cfg.seed, err)
	}
	for i, u := range unsettled {
		if i == oracle.MaxProblems {
			break
		}
		s.t.Errorf("seed %d: unsettled row: %s", s.cfg.seed, u)
	}
	rows, err := s.outboxRows(ctx)
	if err != nil {
		s.t.Fatalf("seed %d: read the outboxes: %v", s.cfg.seed, err)
	}
	var all []api.OutboxRow
	for _, h := range s.hosts {
		all = append(all, rows[h.Name]...)
	}
	for i, p := range SeqsUnique(all) {
		if i == oracle.MaxProblems {
			break
		}
		s.t.Errorf("seed %d: relay seqs: %s", s.cfg.seed, p)
	}
	for _, h := range s.hosts {
		st, err := s.relayStatus(ctx, h)
		if err != nil {
			s.t.Fatalf("seed %d: relay status of %s: %v", s.cfg.seed, h.Name, err)
		}
		if st.Epoch == s.oldEpoch {
			s.t.Errorf("seed %d: %s is still in epoch %s after the restore", s.cfg.seed, h.Name, st.Epoch)
		}
		if st.Quarantined != 0 {
			s.t.Errorf("seed %d: %s holds %d items in quarantine (none was forged or misrouted)", s.cfg.seed, h.Name, st.Quarantined)
		}
	}
	return last
}

// mailboxes reads every mailbox (`inbox --all --json`): the copies each holds, and the bodies
// of the alerts in them.
func (s *soak) mailboxes(ctx context.Context) (map[oracle.Mailbox][]oracle.Copy, []string, error) {
	boxes := map[oracle.Mailbox][]oracle.Copy{}
	var alerts []string
	for _, h := range s.hosts {
		for _, a := range h.Agents {
			m := oracle.Mailbox{Host: h.Name, Agent: a.Name}
			msgs, err := s.mailbox(ctx, h, m)
			if err != nil {
				return nil, nil, err
			}
			boxes[m] = Copies(msgs)
			for _, msg := range msgs {
				if msg.Kind == "alert" {
					alerts = append(alerts, msg.Body)
				}
			}
		}
	}
	return boxes, alerts, nil
}

// mailbox lists everything in m (on host h).
func (s *soak) mailbox(ctx context.Context, h *soakHost, m oracle.Mailbox) ([]api.Message, error) {
	out, err := s.kit.Must(ctx, "inbox", "--home", h.home, "--as", m.Agent, "--all", "--limit", "0", "--json")
	if err != nil {
		return nil, err
	}
	var msgs []api.Message
	if err := json.Unmarshal([]byte(out), &msgs); err != nil {
		return nil, fmt.Errorf("inbox of %s: %w", m, err)
	}
	return msgs, nil
}

// move reads or acks (one in three) a message in a mailbox drawn from those the soak sent to
// (through the daemon, or on the store while the daemon is down), and tells the watch: the copy
// may never be seen unread again.
func (s *soak) move(ctx context.Context) {
	if len(s.sent) == 0 {
		return
	}
	sent := s.sent[s.moves.IntN(len(s.sent))]
	m := sent.To[s.moves.IntN(len(sent.To))]
	h := s.host(m.Host)
	msgs, err := s.mailbox(ctx, h, m)
	if err != nil {
		s.t.Fatalf("seed %d: %v", s.cfg.seed, err)
	}
	s.watch.Look(map[oracle.Mailbox][]oracle.Copy{m: Copies(msgs)})
	if len(msgs) == 0 {
		return
	}
	s.moveOne(ctx, h, m, msgs[s.moves.IntN(len(msgs))].ID, s.moves.IntN(3) == 0)
}

// moveOne reads (or acks) m's copy of id and tells the watch.
func (s *soak) moveOne(ctx context.Context, h *soakHost, m oracle.Mailbox, id string, ack bool) {
	verb := "read"
	if ack {
		verb = "ack"
	}
	out := s.must(ctx, verb, id, "--as", m.Agent, "--json", "--home", h.home)
	// read prints the message; ack takes several ids and prints an array, one per id.
	var got []api.Message
	var err error
	if ack {
		err = json.Unmarshal([]byte(out), &got)
	} else {
		got = make([]api.Message, 1)
		err = json.Unmarshal([]byte(out), &got[0])
	}
	if err != nil || len(got) != 1 || got[0].ID != id {
		s.t.Fatalf("seed %d: %s %s printed %q: %v", s.cfg.seed, verb, id, out, err)
	}
	s.watch.Moved(m, id, got[0].State)
}

func (s *soak) host(name string) *soakHost {
	for _, h := range s.hosts {
		if h.Name == name {
			return h
		}
	}
	s.t.Fatalf("no host %s", name)
	return nil
}

// unsettled lists every host's unsettled outbox rows.
func (s *soak) unsettled(ctx context.Context, alerts []string) ([]string, error) {
	rows, err := s.outboxRows(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, h := range s.hosts {
		for _, u := range Unsettled(rows[h.Name], alerts) {
			out = append(out, h.Name+": "+u)
		}
	}
	return out, nil
}

// outboxRows reads every row of every host's outbox (`outbox --all --limit 0 --json`; without
// --all the finished rows, which the seq check and the alert check read, are left out).
func (s *soak) outboxRows(ctx context.Context) (map[string][]api.OutboxRow, error) {
	out := map[string][]api.OutboxRow{}
	for _, h := range s.hosts {
		js, err := s.kit.Must(ctx, "outbox", "--all", "--limit", "0", "--json", "--home", h.home)
		if err != nil {
			return nil, err
		}
		var rows []api.OutboxRow
		if err := json.Unmarshal([]byte(js), &rows); err != nil {
			return nil, fmt.Errorf("outbox of %s: %w", h.Name, err)
		}
		out[h.Name] = rows
	}
	return out, nil
}
