package host

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/checkpoint"
	"github.com/agentmbx/agentmbx/host/mailstore"
	"github.com/agentmbx/agentmbx/host/ops"
	"github.com/agentmbx/agentmbx/host/reach"
	"github.com/agentmbx/agentmbx/internal/syncbuf"
	"github.com/agentmbx/agentmbx/lan"
	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/outbox"
	"github.com/agentmbx/agentmbx/pairing"
	"github.com/agentmbx/agentmbx/quarantine"
	"github.com/agentmbx/agentmbx/relayclient"
	"github.com/agentmbx/agentmbx/relaylink"
	"github.com/agentmbx/agentmbx/rotation"
)

// Options configure an open Host. A nil *Options means all defaults.
type Options struct {
	// Clock returns the current time (default time.Now). Tests inject a fake clock to move
	// deadlines, backoff and hop windows without sleeping.
	Clock func() time.Time
	// Rand is the randomness for message ids, seals and pairing tokens (default crypto/rand).
	Rand io.Reader
	// Jitter is the outbox's backoff jitter draw, uniform in [0, 1) (outbox.Options.Jitter;
	// default math/rand/v2). Tests that step a fake clock by the schedule pass a fixed 0.5.
	Jitter func() float64
	// Logger receives the host's logs (default slog.Default()).
	Logger *slog.Logger
	// LockTimeout is how long Open waits for the store's lock before api.ErrLocked (default 1 s).
	LockTimeout time.Duration
	// HTTPClient is used for LAN requests to peers (default: a client with a 30 s timeout).
	HTTPClient *http.Client
	// NoSync turns off fsync (bbolt NoSync). For benchmarks and tests that measure nothing but
	// logic; never in production.
	NoSync bool
	// RelayClient is the template of the relay client's options (relaylink.Config.Client): the
	// deterministic simulation (package sim) routes the requests through its simulated network
	// and makes the retries wait nothing. The zero value is right for production.
	RelayClient relayclient.Options
	// Serial runs an outbox pass's sends one after the other on the caller's goroutine instead of
	// one goroutine per peer and transport (package sim: a single-threaded, replayable schedule).
	Serial bool
}

// Host is one agentmbx host: its identity, its store and everything that acts on them. Its
// Service answers the api interfaces directly on the store (when no daemon runs) and is what the
// daemon serves. All methods are safe for concurrent use.
type Host struct {
	dir     string
	name    string
	key     mbx.SigningKey
	enc     mbx.EncKey
	retired []mbx.EncKey // this host's retired enc keys, tried after enc when opening

	db     *bbolt.DB
	ob     *outbox.Store
	quar   *quarantine.Store // relay items this host rejected
	rpos   *checkpoint.Store // relay receive positions (and the quarantine writes)
	clock  func() time.Time
	rand   io.Reader
	ulids  *mbx.ULIDs
	log    *slog.Logger
	client *http.Client
	serial bool // Options.Serial

	lanSrv       *lan.Server                        // the LAN server (lan.go)
	lanTransport *lan.Transport                     // LAN sends and probes (lan.go)
	senders      map[outbox.Transport]outbox.Sender // the LAN transport (the relay's is made per pass)

	mail   *mailstore.Store   // the agents' mail (mail.go)
	kick   chan struct{}      // wakes the outbox loop (buffered, 1)
	relay  *relaylink.Link    // the relay in use (relay_host.go)
	pair   *pairing.Service   // LAN pairing (socket.go)
	rot    *rotation.Rotation // its own key rotation and its peers' (rotation.go)
	ops    *ops.Ops           // counters, readiness, metrics (package host/ops; opsview.go)
	reach  *reach.Tracker     // whether the relay and each peer's LAN address answer (flush.go)
	probes *reach.Prober      // the daemon's probes of targets that do not answer (flush.go)

	mu       sync.Mutex
	listen   string       // configured listen address (meta)
	bind     *lan.Binding // the daemon's LAN listener while it runs (daemon.go)
	daemon   bool         // true while RunDaemon serves this host
	run      *daemonRun   // the running daemon's start and stop (daemon_ctl.go), nil otherwise
	closed   bool
	inflight map[string]bool // hosts with a send in flight (set and cleared by passes)
	passMu   sync.Mutex      // one pass reads and dispatches at a time
	sends    sync.WaitGroup  // send goroutines started by passes
}

// Open opens the host in dir. It fails with api.ErrNotInitialized when dir has no identity, and with
// an error wrapping api.ErrLocked when another process holds the store (the daemon does while it
// runs: talk to it over its control socket instead).
func Open(dir string, opts *Options) (*Host, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	if o.Rand == nil {
		o.Rand = rand.Reader
	} else {
		o.Rand = syncbuf.NewReader(o.Rand) // an injected source need not be safe for concurrent use
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.LockTimeout <= 0 {
		o.LockTimeout = time.Second
	}
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{Timeout: 30 * time.Second}
	}
	// The keys must be there before the store opens; they are read again below, after a
	// rotation left half done is finished.
	if _, _, _, err := readKeys(dir); err != nil {
		return nil, fmt.Errorf("host: open %s: %w", dir, err)
	}
	db, err := openStateDB(dir, o.LockTimeout, o.NoSync)
	if err != nil {
		if errors.Is(err, bolterrors.ErrTimeout) {
			return nil, fmt.Errorf("host: open %s: %w", dir, api.ErrLocked)
		}
		return nil, fmt.Errorf("host: open %s: %w", dir, err)
	}
	// A rotation whose keys were not swapped yet (a crash in PrepareRotation) is finished first.
	if err := rotation.FinishSwap(homeOf(dir), db); err != nil {
		db.Close()
		return nil, fmt.Errorf("host: open %s: rotation: %w", dir, err)
	}
	hk, ek, retired, err := readKeys(dir)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("host: open %s: %w", dir, err)
	}
	h := &Host{
		dir: dir, key: hk, enc: ek, retired: retired, db: db,
		clock: o.Clock, rand: o.Rand, ulids: mbx.NewULIDs(o.Rand), log: o.Logger, client: o.HTTPClient,
		serial: o.Serial,
		kick:   make(chan struct{}, 1), inflight: map[string]bool{},
	}
	h.reach = reach.New(reach.Config{Clock: o.Clock, OnUp: h.recovered, OnDown: func(t reach.Target) { h.probes.Watch(t) }})
	h.probes = reach.NewProber(reach.ProberConfig{Tracker: h.reach, Probe: h.probeTarget, Every: probeEvery})
	if err := db.Update(func(tx *bbolt.Tx) error {
		if err := createBuckets(tx); err != nil {
			return err
		}
		m := tx.Bucket(bucketMeta)
		h.name = string(m.Get(metaHost))
		h.listen = string(m.Get(metaListen))
		return nil
	}); err != nil {
		db.Close()
		return nil, fmt.Errorf("host: open %s: %w", dir, err)
	}
	if h.name == "" {
		db.Close()
		return nil, fmt.Errorf("host: open %s: %w", dir, api.ErrNotInitialized)
	}
	h.mail = mailstore.New(mailstore.Config{DB: db, Name: h.name, Clock: o.Clock, Host: mailHost{h}})
	ob, err := outbox.Open(db, &outbox.Options{Clock: o.Clock, Jitter: o.Jitter})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("host: open %s: %w", dir, err)
	}
	h.ob = ob
	if h.quar, err = quarantine.Open(db, &quarantine.Options{Clock: o.Clock}); err != nil {
		db.Close()
		return nil, fmt.Errorf("host: open %s: %w", dir, err)
	}
	if h.rpos, err = checkpoint.Open(db, h.quar, &checkpoint.Options{Clock: o.Clock, Logger: o.Logger}); err != nil {
		db.Close()
		return nil, fmt.Errorf("host: open %s: %w", dir, err)
	}
	h.relay = relaylink.New(relaylink.Config{DB: db, Outbox: h.ob, Quarantine: h.quar, Positions: h.rpos,
		Name: h.name, Key: h.key, EncPub: h.enc.PublicKey(), Clock: o.Clock, Logger: o.Logger, Host: relayHost{h},
		Hold: h.relayHold, Client: o.RelayClient})
	if h.rot, err = rotation.Open(rotation.Config{Home: homeOf(dir), DB: db, Outbox: h.ob, Positions: h.rpos,
		Relay: h.relay, Name: h.name, Key: h.key, Enc: append([]mbx.EncKey{h.enc}, h.retired...), Clock: o.Clock,
		Rand: o.Rand, Logger: o.Logger, LAN: o.HTTPClient, Host: rotationHost{h}}); err != nil {
		db.Close()
		return nil, fmt.Errorf("host: open %s: %w", dir, err)
	}
	h.newLAN()
	h.ops = h.newOps()
	h.pair = h.newPairing()
	return h, nil
}

// Close closes the store. Wait calls in progress return.
func (h *Host) Close() error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil
	}
	h.closed = true
	h.mu.Unlock()
	h.mail.Close()
	if err := h.db.Close(); err != nil {
		return fmt.Errorf("host: close: %w", err)
	}
	return nil
}

// Name is this host's name.
func (h *Host) Name() string { return h.name }

// Key is this host's Ed25519 host key.
func (h *Host) Key() mbx.SigningKey { return h.key }

// EncKey is this host's X25519 enc key.
func (h *Host) EncKey() mbx.EncKey { return h.enc }

// ListenAddr is the configured LAN listen address (from init), or "" when none was set.
func (h *Host) ListenAddr() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.listen
}

// kickOutbox wakes the outbox loop (if the daemon runs); it never blocks.
func (h *Host) kickOutbox() {
	select {
	case h.kick <- struct{}{}:
	default:
	}
}
