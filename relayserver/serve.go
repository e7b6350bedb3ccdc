package relayserver

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"time"

	"github.com/agentmbx/agentmbx/internal/fsutil"
	"github.com/agentmbx/agentmbx/internal/logkey"
	"github.com/agentmbx/agentmbx/mbx"
)

// Env names read by Serve's callers.
const (
	EnvRelayDir        = "MBX_RELAY_DIR"
	EnvRelayTrustProxy = "MBX_RELAY_TRUST_PROXY"
	// EnvRelayDB holds the URL of a shared database (--db), which may carry a password: the
	// environment keeps it out of the process list.
	EnvRelayDB = "MBX_RELAY_DB"
)

// ServeConfig is what `agentmbx relay serve` runs.
type ServeConfig struct {
	// StoreDir holds the store and relay.key.
	StoreDir string
	// DB, when set, is the URL of a database that several relay processes share (--db); Open
	// receives it instead of StoreDir, and the relay key must come from MBX_RELAY_KEY, so that
	// every replica serves the same key. Logs show it without its password (DBLabel).
	DB string
	// Listen is the address to listen on (default ":7374"); "127.0.0.1:0" picks a free port.
	Listen string
	// AddrFile, when set, receives the bound host:port (written atomically) once listening.
	AddrFile string
	// Open opens the store in a directory, or at DB (sqlitestore.Open or pgstore.Open in
	// production).
	Open func(ctx context.Context, dir string) (Store, error)
	// Options of the Server; Key is filled from LoadKey.
	Options Options
	// Getenv reads MBX_RELAY_KEY. Default os.Getenv.
	Getenv func(string) string
	// ShutdownTimeout bounds the graceful shutdown. Default 10 s.
	ShutdownTimeout time.Duration
	// HeartbeatEvery is how often the store's heartbeat is written. Default mbx.RelayHeartbeat.
	HeartbeatEvery time.Duration
	// TLS, when set, makes the relay serve HTTPS itself (HTTP/2 and HTTP/1.1) with this config:
	// certificates from files or from an ACME manager (the command builds it). Nil serves plain
	// HTTP (loopback, or behind a TLS proxy).
	TLS *tls.Config
	// KeyLoaded, when set, is called with the relay's public key once it is loaded, before Ready.
	KeyLoaded func(publicKey string)
	// Ready, when set, is called with the bound address once the relay is listening, before the
	// address file is written.
	Ready func(addr string)
	// MetricsListen, when set, is a second listener serving GET /metrics (no token: bind it to a
	// private address), /healthz and /readyz. MetricsAddrFile receives its bound host:port.
	MetricsListen   string
	MetricsAddrFile string
	// Backups, when set, takes online backups of the store on a schedule while the relay serves
	// (RunBackups); its Logger, Clock and Metrics default to the relay's.
	Backups *BackupSchedule
}

// Serve runs the relay until ctx is done, then shuts down gracefully: it stops accepting, lets
// requests in flight finish (each answered only after its commit), and closes the store.
//
// At start it loads the relay key (LoadKey), opens the store, binds the key to it (a store of
// another key is refused before anything is written to it), and rotates the epoch when the stored
// heartbeat is older than mbx.RelayHeartbeatStale (a restore or a long outage; docs/design.md:
// Epochs, restarts and restores).
func Serve(ctx context.Context, cfg ServeConfig) (err error) {
	where := cfg.StoreDir
	if cfg.DB != "" {
		where = DBLabel(cfg.DB)
	} else if cfg.StoreDir == "" {
		return fmt.Errorf("relayserver: serve: no store directory (--store-dir or %s)", EnvRelayDir)
	}
	if cfg.Listen == "" {
		cfg.Listen = fmt.Sprintf(":%d", mbx.DefaultRelayPort)
	}
	if cfg.Getenv == nil {
		cfg.Getenv = os.Getenv
	}
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = 10 * time.Second
	}
	if cfg.HeartbeatEvery <= 0 {
		cfg.HeartbeatEvery = mbx.RelayHeartbeat
	}
	opt := cfg.Options
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.DiscardHandler)
	}
	if opt.Clock == nil {
		opt.Clock = time.Now
	}
	log := opt.Logger
	if opt.Rand == nil {
		opt.Rand = rand.Reader
	}
	if cfg.DB != "" && cfg.Getenv(EnvRelayKey) == "" {
		return fmt.Errorf("relayserver: serve: a shared database needs the relay key in %s (every replica serves the same key): %w",
			EnvRelayKey, ErrBadKey)
	}
	key, src, err := LoadKey(cfg.StoreDir, cfg.Getenv, opt.Rand)
	if err != nil {
		return err
	}
	if cfg.KeyLoaded != nil {
		cfg.KeyLoaded(key.PublicKey())
	}
	opt.Key = key
	loc := cfg.StoreDir
	if cfg.DB != "" {
		loc = cfg.DB
	}
	opt.HeartbeatEvery = cfg.HeartbeatEvery
	if opt.Metrics == nil && (cfg.MetricsListen != "" || opt.MetricsToken != "") {
		opt.Metrics = NewMetrics(0)
	}
	store, err := cfg.Open(ctx, loc)
	if err != nil {
		return fmt.Errorf("relayserver: serve: %w", err)
	}
	defer func() {
		if cerr := store.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	// The key first: a store that belongs to another relay is refused before anything here
	// writes to it (a rotated epoch or a fresh heartbeat would hide a restore from its own relay).
	if err := store.BindRelayKey(ctx, key.PublicKey()); err != nil {
		return fmt.Errorf("relayserver: serve: %w", err)
	}
	logRestore(ctx, store, log)
	if err := checkEpoch(ctx, store, opt.Clock(), log); err != nil {
		return fmt.Errorf("relayserver: serve: %w", err)
	}
	opt.MaxRelayItems, opt.MaxRelayBytes = diskCapacity(ctx, store, cfg.StoreDir, opt)
	if opt.MaxWaiting <= 0 {
		opt.MaxWaiting = ParkedCapFor(MachineMemory())
	}
	if need := NoFileShortfall(NoFileLimit(), opt.MaxWaiting); need > 0 {
		// Past the limit the relay cannot accept connections at all, pushes included.
		log.Warn("the open-file limit is below the parked-poll cap: raise it (LimitNOFILE= in the systemd unit, ulimit -n) or lower --max-parked",
			"nofile", NoFileLimit(), "max_parked", opt.MaxWaiting, "need", need)
	}
	srv, err := New(ctx, store, opt)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("relayserver: serve: %w", err)
	}
	hs := NewHTTPServer(srv)
	hs.RegisterOnShutdown(srv.Shutdown) // parked long polls answer now, so Shutdown does not wait for them
	errc := make(chan error, 2)
	if cfg.TLS != nil {
		// TLS is ended here rather than by ServeTLS, so that answered held polls come back through
		// srv.Listener already decrypted; HTTP/1.1 unless the config names h2 itself (an HTTP/2
		// stream cannot be taken over, so its long polls would park the standard way).
		tc := cfg.TLS.Clone()
		if len(tc.NextProtos) == 0 {
			tc.NextProtos = []string{"http/1.1"}
		}
		hs.TLSConfig = tc
		ln = tls.NewListener(ln, tc)
	}
	ln = srv.Listener(ln)
	go func() { errc <- hs.Serve(ln) }()
	ms, err := serveMetrics(cfg, srv, errc)
	if err != nil {
		_ = hs.Close()
		return err
	}
	if ms != nil {
		defer ms.Close()
	}
	addr := ln.Addr().String()
	log.Info("relay serving", logkey.Addr, addr, logkey.Store, where, logkey.Key, key, logkey.KeySource, src,
		logkey.Epoch, srv.Epoch(), logkey.TrustProxy, opt.TrustProxy)
	if cfg.Ready != nil {
		cfg.Ready(addr)
	}
	if cfg.AddrFile != "" {
		if err := fsutil.WriteFileAtomic(cfg.AddrFile, []byte(addr+"\n"), 0o600); err != nil {
			_ = hs.Close()
			return fmt.Errorf("relayserver: serve: addr file: %w", err)
		}
	}
	// The retention sweep and the deny watch run until shutdown begins and have stopped before
	// the store closes.
	sweepCtx, stopSweep := context.WithCancel(context.Background())
	sweepDone := make(chan struct{})
	go func() { defer close(sweepDone); srv.RunSweeper(sweepCtx) }()
	defer func() { stopSweep(); <-sweepDone }()
	// The deny list is read again every DenyPollEvery (entries another process added).
	denyCtx, stopDeny := context.WithCancel(context.Background())
	denyDone := make(chan struct{})
	go func() { defer close(denyDone); srv.RunDenyWatch(denyCtx) }()
	defer func() { stopDeny(); <-denyDone }()
	if b := cfg.Backups; b != nil {
		sched := *b
		if sched.Logger == nil {
			sched.Logger = log
		}
		if sched.Clock == nil {
			sched.Clock = opt.Clock
		}
		if sched.Metrics == nil {
			sched.Metrics = opt.Metrics
		}
		backupCtx, stopBackups := context.WithCancel(context.Background())
		backupDone := make(chan struct{})
		go func() {
			defer close(backupDone)
			if err := RunBackups(backupCtx, sched); err != nil {
				log.Error("scheduled backups do not run", logkey.Err, err)
			}
		}()
		defer func() { stopBackups(); <-backupDone }()
	}
	beatCtx, stopBeat := context.WithCancel(context.Background())
	beatDone := make(chan struct{})
	go func() { defer close(beatDone); srv.RunHeartbeat(beatCtx, cfg.HeartbeatEvery) }()
	defer func() { stopBeat(); <-beatDone }()
	select {
	case err := <-errc:
		_ = hs.Close()
		return fmt.Errorf("relayserver: serve: %w", err)
	case <-ctx.Done():
		stopBeat() // the shutdown writes the last heartbeat
		<-beatDone
		return shutdown(hs, ms, srv, cfg.ShutdownTimeout, log)
	}
}

// logRestore says at start that the store came up from a restore: the first start after one
// (no heartbeat written since it was restored).
func logRestore(ctx context.Context, store Store, log *slog.Logger) {
	m, err := store.Meta(ctx)
	if err != nil || m.RestoredAt.IsZero() || m.Heartbeat.After(m.RestoredAt) {
		return
	}
	log.Warn("relay store came up from a restore: hosts re-push and re-pull what the backup lacked",
		logkey.RestoredAt, m.RestoredAt, logkey.Backup, m.RestoredFrom, logkey.Epoch, m.Epoch)
}

// staleEpochRotator is a shared store's atomic form of the start-up epoch check (pgstore): it
// writes the heartbeat and rotates the epoch when the stored heartbeat was stale, in one
// transaction, so replicas starting together rotate once.
type staleEpochRotator interface {
	RotateEpochIfStale(ctx context.Context, now time.Time, stale time.Duration) (epoch string, rotated bool, err error)
}

// checkEpoch rotates the epoch when the stored heartbeat is older than mbx.RelayHeartbeatStale (a
// restore or a long outage; docs/design.md: Epochs, restarts and restores) and records now as the
// heartbeat.
func checkEpoch(ctx context.Context, store Store, now time.Time, log *slog.Logger) error {
	if r, ok := store.(staleEpochRotator); ok {
		epoch, rotated, err := r.RotateEpochIfStale(ctx, now, mbx.RelayHeartbeatStale)
		if err == nil && rotated {
			log.Warn("store heartbeat is stale (restore or long outage): epoch rotated", logkey.Epoch, epoch)
		}
		return err
	}
	meta, err := store.Meta(ctx)
	if err != nil {
		return err
	}
	if !meta.Heartbeat.IsZero() && now.Sub(meta.Heartbeat) > mbx.RelayHeartbeatStale {
		epoch, err := store.RotateEpoch(ctx)
		if err != nil {
			return err
		}
		log.Warn("store heartbeat is stale (restore or long outage): epoch rotated",
			logkey.Heartbeat, meta.Heartbeat, logkey.Epoch, epoch)
	}
	return store.Heartbeat(ctx, now)
}

// DBLabel is a database URL as logs and messages show it: without its password.
func DBLabel(dbURL string) string {
	u, err := url.Parse(dbURL)
	if err != nil || u.Scheme == "" {
		return "(database)"
	}
	if q := u.Query(); q.Has("password") {
		q.Set("password", "xxxxx")
		u.RawQuery = q.Encode()
	}
	return u.Redacted()
}

// NewHTTPServer is the HTTP server relay serve runs h in, with its timeouts.
func NewHTTPServer(h http.Handler) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 2 * time.Minute,
		WriteTimeout: 2 * time.Minute, IdleTimeout: 2 * time.Minute}
}

// shutdown drains the relay: /readyz turns 503 and parked long polls answer at once
// (srv.Shutdown), the listener stops accepting, requests in flight finish (each answered only
// after its commit) within timeout, and a last heartbeat is written. The caller then stops the
// sweeper and closes the store, which commits what its writer still holds.
func shutdown(hs, ms *http.Server, srv *Server, timeout time.Duration, log *slog.Logger) error {
	start := time.Now()
	log.Info("relay shutting down", logkey.Timeout, timeout)
	srv.Shutdown()
	sctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		_ = hs.Close()
		return fmt.Errorf("relayserver: shutdown: requests still running after %s: %w", timeout, err)
	}
	if err := srv.Heartbeat(context.Background()); err != nil {
		log.Warn("final heartbeat failed", logkey.Err, err)
	}
	if ms != nil {
		_ = ms.Shutdown(sctx)
	}
	log.Info("relay drained", logkey.MS, time.Since(start).Milliseconds())
	return nil
}

// serveMetrics starts the --metrics-listen server, when configured; its failure goes to errc.
func serveMetrics(cfg ServeConfig, srv *Server, errc chan<- error) (*http.Server, error) {
	if cfg.MetricsListen == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", cfg.MetricsListen)
	if err != nil {
		return nil, fmt.Errorf("relayserver: serve: metrics listener: %w", err)
	}
	ms := &http.Server{Handler: srv.OpsHandler(), ReadHeaderTimeout: 10 * time.Second, ReadTimeout: time.Minute,
		WriteTimeout: time.Minute, IdleTimeout: 2 * time.Minute}
	go func() {
		if err := ms.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("metrics listener: %w", err)
		}
	}()
	addr := ln.Addr().String()
	srv.log.Info("relay metrics serving", logkey.Addr, addr)
	if cfg.MetricsAddrFile != "" {
		if err := fsutil.WriteFileAtomic(cfg.MetricsAddrFile, []byte(addr+"\n"), 0o600); err != nil {
			_ = ms.Close()
			return nil, fmt.Errorf("relayserver: serve: metrics addr file: %w", err)
		}
	}
	return ms, nil
}
