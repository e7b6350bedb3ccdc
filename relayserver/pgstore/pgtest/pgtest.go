// Package pgtest gives tests a real PostgreSQL server: one throwaway cluster per test binary,
// started on first use and stopped by Main, with a fresh database per caller.
//
// The cluster is initialised in a temporary directory (initdb, trust authentication for the local
// user postgres), runs with fsync and synchronous_commit on, and listens only on a unix socket in
// that directory. Run as root (as CI does), the server runs as the unprivileged user postgres (or
// nobody), since PostgreSQL refuses to run as root.
//
// Where the server comes from:
//   - MBX_PG_URL, when set, names a running server (a URL whose user may create databases); no
//     cluster is started.
//   - Else the binaries in MBX_PG_BIN, or the newest /usr/lib/postgresql/*/bin, or initdb on
//     PATH.
//
// Without either, tests skip with a message saying how to run them; with CI=true they fail
// instead, so CI never passes without running them.
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Env names read by the package.
const (
	EnvURL = "MBX_PG_URL"
	EnvBin = "MBX_PG_BIN"
)

// HowToRun is the skip message's advice.
const HowToRun = "PostgreSQL tests need a server: install PostgreSQL (apt-get install postgresql), " +
	"or set " + EnvBin + "=/usr/lib/postgresql/15/bin, or " + EnvURL + "=postgres://user@host/db of a running server"

// Cluster is the server the tests of one binary share.
type Cluster struct {
	// Admin is a URL of the server's maintenance database, for a superuser (or a user that may
	// create databases).
	Admin string
	// SocketDir is the unix socket directory of a cluster this package started ("" for
	// MBX_PG_URL).
	SocketDir string

	dir  string
	cmd  *exec.Cmd
	done chan struct{}
	dbs  atomic.Int64
}

var (
	once    sync.Once
	shared  *Cluster
	initErr error
	skipMsg string
)

// Main runs the tests of a package and then stops the cluster if one was started. Call it from
// TestMain: func TestMain(m *testing.M) { pgtest.Main(m) }.
func Main(m *testing.M) { os.Exit(Wrap(m).Run()) }

// Wrap returns m whose Run also stops the cluster afterwards, for a TestMain that hands m to
// another runner (testscript.Main).
func Wrap(m *testing.M) interface{ Run() int } { return wrapped{m} }

type wrapped struct{ m *testing.M }

func (w wrapped) Run() int {
	code := w.m.Run()
	if shared != nil {
		shared.stop()
	}
	return code
}

// Start returns the shared cluster, starting it on first use. Without a server it skips t (or
// fails it when CI=true).
func Start(t testing.TB) *Cluster {
	t.Helper()
	once.Do(func() { shared, skipMsg, initErr = start() })
	switch {
	case initErr != nil:
		t.Fatalf("pgtest: %v", initErr)
	case skipMsg != "" && os.Getenv("CI") == "true":
		t.Fatalf("pgtest: %s (CI=true: PostgreSQL tests must run)", skipMsg)
	case skipMsg != "":
		t.Skipf("pgtest: %s. %s", skipMsg, HowToRun)
	}
	return shared
}

// NewDatabase creates an empty database and returns its URL; the database is dropped when t ends.
func (c *Cluster) NewDatabase(t testing.TB) string {
	t.Helper()
	name := fmt.Sprintf("t%d_%d", os.Getpid(), c.dbs.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := c.exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("pgtest: create database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := c.exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("pgtest: drop database: %v", err)
		}
	})
	return c.URL(name)
}

// URL is the URL of database db on the cluster.
func (c *Cluster) URL(db string) string {
	u, err := url.Parse(c.Admin)
	if err != nil {
		panic(err) // Admin was parsed when the cluster started
	}
	u.Path = "/" + db
	return u.String()
}

func (c *Cluster) exec(ctx context.Context, sql string) error {
	conn, err := pgx.Connect(ctx, c.Admin)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, sql)
	return err
}

// start finds or starts a server. A non-empty skip says why there is none.
func start() (c *Cluster, skip string, err error) {
	if u := os.Getenv(EnvURL); u != "" {
		if _, err := url.Parse(u); err != nil {
			return nil, "", fmt.Errorf("%s: %w", EnvURL, err)
		}
		return &Cluster{Admin: u}, "", nil
	}
	bin := findBin()
	if bin == "" {
		return nil, "no PostgreSQL server binaries found (initdb)", nil
	}
	c, err = startCluster(bin)
	return c, "", err
}

func findBin() string {
	if b := os.Getenv(EnvBin); b != "" {
		if _, err := os.Stat(filepath.Join(b, "initdb")); err != nil {
			return ""
		}
		return b
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p)
	}
	return ""
}

func version(dir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(dir)))
	return n
}

// runAs is the credential the server runs under: an unprivileged user when we are root.
func runAs() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
	}
	return nil, errors.New("running as root, and neither user postgres nor nobody exists to run the server")
}

func startCluster(bin string) (*Cluster, error) {
	cred, err := runAs()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "agentmbx-pg-")
	if err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			_ = os.RemoveAll(dir)
		}
	}()
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return nil, err
		}
	}
	data := filepath.Join(dir, "data")
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres", "-A", "trust",
		"-E", "UTF8", "--locale=C", "--no-sync")
	initdb.Dir = dir
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("initdb: %v\n%s", err, out)
	}
	logf, err := os.Create(filepath.Join(dir, "server.log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	srv := exec.Command(filepath.Join(bin, "postgres"), "-D", data, "-p", "5432",
		"-c", "listen_addresses=", "-c", "unix_socket_directories="+dir,
		"-c", "fsync=on", "-c", "synchronous_commit=on", "-c", "full_page_writes=on",
		"-c", "max_connections=300", "-c", "shared_buffers=64MB", "-c", "log_min_messages=warning")
	srv.Dir = dir
	srv.Stdout, srv.Stderr = logf, logf
	// The server dies with the test binary, even when that is killed.
	srv.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGQUIT, Setpgid: true}
	if err := srv.Start(); err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	c := &Cluster{dir: dir, cmd: srv, done: make(chan struct{}), SocketDir: dir,
		Admin: "postgres://postgres@/postgres?host=" + url.QueryEscape(dir) + "&sslmode=disable"}
	go func() { _ = srv.Wait(); close(c.done) }()
	if err := c.waitReady(); err != nil {
		c.stop()
		log, _ := os.ReadFile(filepath.Join(dir, "server.log"))
		return nil, fmt.Errorf("postgres did not start: %v\n%s", err, tail(string(log), 2000))
	}
	ok = true
	return c, nil
}

func (c *Cluster) waitReady() error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := c.exec(ctx, "SELECT 1")
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-c.done:
			return errors.New("server exited")
		default:
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stop shuts the server down (fast shutdown, then a kill) and removes its directory.
func (c *Cluster) stop() {
	if c.cmd == nil {
		return
	}
	_ = c.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-c.done:
	case <-time.After(30 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.done
	}
	_ = os.RemoveAll(c.dir)
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return strings.TrimSpace(s)
}
