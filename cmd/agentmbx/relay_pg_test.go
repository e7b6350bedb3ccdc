package main

// Relay replicas on one PostgreSQL database: two and three `agentmbx relay serve --db` processes,
// each host on its own replica's URL, mail both ways while replicas are SIGKILLed and restarted at
// random and the database connection is cut and restored. Nothing may be lost or duplicated.

import (
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/internal/testkit"
	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/relayserver"
	"github.com/agentmbx/agentmbx/relayserver/pgstore"
	"github.com/agentmbx/agentmbx/relayserver/pgstore/pgtest"
)

// pgProxy forwards TCP connections from 127.0.0.1 to the test cluster; cut drops every
// connection and refuses new ones until restore, as a network outage between relay and database
// would.
type pgProxy struct {
	t      *testing.T
	ln     net.Listener
	dial   func() (net.Conn, error)
	mu     sync.Mutex
	conns  map[net.Conn]bool
	down   bool
	closed bool
}

func startPGProxy(t *testing.T, c *pgtest.Cluster) *pgProxy {
	t.Helper()
	dial := func() (net.Conn, error) { return net.Dial("unix", filepath.Join(c.SocketDir, ".s.PGSQL.5432")) }
	if c.SocketDir == "" {
		u, err := url.Parse(c.Admin)
		if err != nil {
			t.Fatal(err)
		}
		host := u.Host
		if u.Port() == "" {
			host = net.JoinHostPort(u.Hostname(), "5432")
		}
		dial = func() (net.Conn, error) { return net.Dial("tcp", host) }
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &pgProxy{t: t, ln: ln, dial: dial, conns: map[net.Conn]bool{}}
	t.Cleanup(func() {
		p.mu.Lock()
		p.closed = true
		p.mu.Unlock()
		ln.Close()
		p.cut()
	})
	go p.serve()
	return p
}

func (p *pgProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.pipe(c)
	}
}

func (p *pgProxy) pipe(c net.Conn) {
	p.mu.Lock()
	down := p.down || p.closed
	p.mu.Unlock()
	if down {
		c.Close()
		return
	}
	s, err := p.dial()
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	p.conns[c], p.conns[s] = true, true
	p.mu.Unlock()
	done := make(chan struct{}, 2)
	go func() { io.Copy(s, c); done <- struct{}{} }()
	go func() { io.Copy(c, s); done <- struct{}{} }()
	<-done
	c.Close()
	s.Close()
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, s)
	p.mu.Unlock()
}

// cut closes every connection and refuses new ones.
func (p *pgProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = true
	for c := range p.conns {
		c.Close()
	}
}

func (p *pgProxy) restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = false
}

// url is the URL of database db through the proxy.
func (p *pgProxy) url(t *testing.T, admin, db string) string {
	u, err := url.Parse(admin)
	if err != nil {
		t.Fatal(err)
	}
	u.Host, u.Path, u.RawQuery = p.ln.Addr().String(), "/"+db, "sslmode=disable&connect_timeout=10"
	return u.String()
}

// replica is one relay process on the shared database, always restarted on its own address.
type replica struct {
	t      *testing.T
	n      int
	dir    string
	listen string
	env    []string
	db     string
	p      *relayProc
	logs   []*testkit.SyncBuffer // of every process this replica ran
}

func (r *replica) start() {
	r.t.Helper()
	addrFile := filepath.Join(r.dir, "replica"+strconv.Itoa(r.n)+".addr")
	r.p = startRelay(r.t, addrFile, r.env, "--db", r.db, "--listen", r.listen)
	r.logs = append(r.logs, r.p.log)
}

func (r *replica) kill() {
	r.p.p.Cmd.Process.Kill()
	<-r.p.p.Done()
}

func (r *replica) url() string { return "http://" + r.listen }

func TestE2ERelayReplicasOnPostgres(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test")
	}
	for _, n := range []int{2, 3} {
		t.Run(fmt.Sprintf("%dreplicas", n), func(t *testing.T) { testReplicas(t, n) })
	}
}

func testReplicas(t *testing.T, n int) {
	c := pgtest.Start(t)
	dbURL := c.NewDatabase(t)
	u, _ := url.Parse(dbURL)
	proxy := startPGProxy(t, c)
	key, err := mbx.GenerateSigningKey(crand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("MBX_CHAOS_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("chaos seed %d (MBX_CHAOS_SEED replays it)", seed)
	var chachaSeed [32]byte
	binary.LittleEndian.PutUint64(chachaSeed[:], seed)
	rng := rand.New(rand.NewChaCha8(chachaSeed))

	dir := e2eDir(t)
	reps := make([]*replica, n)
	for i := range reps {
		reps[i] = &replica{t: t, n: i, dir: dir, listen: freePort(t),
			env: []string{relayserver.EnvRelayKey + "=" + key.Seed(), relayserver.EnvRelayDB + "="},
			db:  proxy.url(t, c.Admin, strings.TrimPrefix(u.Path, "/"))}
		reps[i].start()
	}

	hosts := make([]*node, n)
	for i := range hosts {
		hosts[i] = newNode(t, dir, fmt.Sprintf("h%d", i))
		hosts[i].must("agents", "add", fmt.Sprintf("a%d", i))
	}
	pinWithoutLAN(t, hosts...)
	out := hosts[0].must("relay", "set", reps[0].url())
	m := regexp.MustCompile(`(?m)^fingerprint: (\S+)$`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("relay set printed:\n%s", out)
	}
	for i, h := range hosts[1:] {
		h.must("relay", "set", reps[i+1].url(), "--key", m[1])
	}
	for _, h := range hosts {
		h.start()
	}
	for _, h := range hosts {
		h.waitFor("enrolment at its replica", func() (bool, string) {
			st := h.relayStatus()
			return st.Enrolled && st.Senders == n-1 && st.EncAdExp != "" && st.Daemon, fmt.Sprintf("%+v", st)
		})
	}

	// Rounds of mail from every host to every other, each followed by a fault.
	type sent struct {
		id       string
		from, to int
	}
	var mail []sent
	cuts := 0
	const rounds = 4 // 8 messages with two replicas, 24 with three
	for round := range rounds {
		for i, a := range hosts {
			for j := range hosts {
				if i != j {
					id := a.send(fmt.Sprintf("a%d", i), fmt.Sprintf("a%d@h%d", j, j),
						fmt.Sprintf("round %d", round), fmt.Sprintf("from h%d to h%d in round %d", i, j, round))
					mail = append(mail, sent{id, i, j})
				}
			}
		}
		k := rng.IntN(n)
		switch fault := rng.IntN(3); fault {
		case 0:
			t.Logf("round %d: SIGKILL replica %d, restart", round, k)
			reps[k].kill()
			reps[k].start()
		case 1:
			t.Logf("round %d: database connections cut for a second", round)
			cuts++
			proxy.cut()
			time.Sleep(time.Second)
			proxy.restore()
		default:
			t.Logf("round %d: SIGKILL replica %d while the database is cut, restart after", round, k)
			reps[k].kill()
			proxy.cut()
			time.Sleep(500 * time.Millisecond)
			proxy.restore()
			reps[k].start()
		}
	}

	for _, s := range mail {
		got := hosts[s.to].waitMail(fmt.Sprintf("a%d", s.to), s.id)
		if got.From != fmt.Sprintf("a%d@h%d", s.from, s.from) {
			t.Fatalf("message %s from %s, want a%d@h%d", s.id, got.From, s.from, s.from)
		}
	}
	for _, s := range mail {
		hosts[s.from].waitSent(s.id, "delivered", fmt.Sprintf("a%d@h%d", s.to, s.to))
	}
	for j, h := range hosts {
		want := 0
		for _, s := range mail {
			if s.to == j {
				want++
			}
		}
		if got := h.inbox(fmt.Sprintf("a%d", j)); len(got) != want {
			t.Fatalf("h%d's mailbox holds %d messages, want %d", j, len(got), want)
		}
		var q []api.QuarantineItem
		h.mustJSON(&q, "relay", "quarantine")
		if len(q) != 0 {
			t.Fatalf("h%d quarantined %+v", j, q)
		}
	}
	// Every item and receipt was acked: the shared queues are empty.
	conn, err := pgx.Connect(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	hosts[0].waitFor("the relay's queues to empty", func() (bool, string) {
		var items int
		if err := conn.QueryRow(context.Background(), "SELECT count(*) FROM items").Scan(&items); err != nil {
			return false, err.Error()
		}
		return items == 0, fmt.Sprintf("%d items queued", items)
	})
	if cuts > 0 {
		// The cut reached the replicas: their listening sessions broke and came back.
		lost := 0
		for _, r := range reps {
			for _, l := range r.logs {
				lost += strings.Count(l.String(), "listener lost")
			}
		}
		if lost == 0 {
			t.Fatalf("%d database cuts, yet no replica's listener noticed", cuts)
		}
	}
	t.Logf("%d messages through %d replicas, each delivered once", len(mail), n)
}

func TestRelayServeDBNeedsKeyAndOneStore(t *testing.T) {
	t.Setenv(relayserver.EnvRelayDir, "")
	t.Setenv(relayserver.EnvRelayDB, "")
	t.Setenv(relayserver.EnvRelayKey, "")
	var ue *usageError
	if _, _, err := runRelay(t, "serve", "--store-dir", t.TempDir(), "--db", "postgres://x/y"); !errors.As(err, &ue) {
		t.Fatalf("serve with --store-dir and --db = %v, want a usage error", err)
	}
	_, _, err := runRelay(t, "serve", "--db", "postgres://relay:s3cret@127.0.0.1:1/y", "--listen", "127.0.0.1:0")
	if !errors.Is(err, relayserver.ErrBadKey) || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("serve --db without %s = %v, want ErrBadKey without the password", relayserver.EnvRelayKey, err)
	}
}

func TestRelayRotateEpochDB(t *testing.T) {
	t.Setenv(relayserver.EnvRelayDB, "")
	db := pgtest.Start(t).NewDatabase(t)
	st, err := pgstore.Open(context.Background(), db, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	before, _ := st.Meta(context.Background())
	out, _, err := runRelay(t, "rotate-epoch", "--db", db)
	if err != nil || !strings.HasPrefix(out, "new epoch ") {
		t.Fatalf("rotate-epoch --db = %q, %v", out, err)
	}
	after, _ := st.Meta(context.Background())
	if after.Epoch == before.Epoch || !strings.Contains(out, after.Epoch) {
		t.Fatalf("epoch %s → %s, command printed %q", before.Epoch, after.Epoch, out)
	}
	// While a replica serves (holds the serving lock), the rotation is refused and changes nothing.
	woke := make(chan string, 8)
	cancel := st.Subscribe(func(k string) {
		select {
		case woke <- k:
		default:
		}
	})
	defer cancel()
	<-woke // listening, lock held
	if _, _, err := runRelay(t, "rotate-epoch", "--db", db); !errors.Is(err, relayserver.ErrLocked) {
		t.Fatalf("rotate-epoch --db while serving = %v, want ErrLocked", err)
	}
	if m, _ := st.Meta(context.Background()); m.Epoch != after.Epoch {
		t.Fatalf("a refused rotation changed the epoch")
	}
}
