package relaylink

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/bbolt"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/checkpoint"
	"github.com/agentmbx/agentmbx/internal/logkey"
	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/outbox"
	"github.com/agentmbx/agentmbx/quarantine"
	"github.com/agentmbx/agentmbx/relayclient"
)

// Host is what a Link needs of the host it serves: its peers, its mailboxes (the commit of a
// relay item, inside the transaction of its page) and waking its loops.
type Host interface {
	// Peers lists the pinned peers, read in tx.
	Peers(tx *bbolt.Tx) ([]Peer, error)
	// Envelope checks and commits, in tx, an envelope item: the host's receive path (the
	// sender must be a paired host), with its dedup. A refusal is a rejected verdict, never an
	// error.
	Envelope(tx *bbolt.Tx, it checkpoint.Item) (checkpoint.Verdict, error)
	// Receipt applies, in tx, a delivery receipt the paired host peer pushed and returns the
	// checkpoint's verdict: accepted, a duplicate (duplicate or stale), or rejected with the
	// cause the refusing rule names. A refusal is a verdict, never an error.
	Receipt(tx *bbolt.Tx, peer string, wire []byte) (checkpoint.Verdict, error)
	// Alert leaves the alert of a row that ended undelivered in its sender's mailbox, in tx.
	Alert(tx *bbolt.Tx, row outbox.Row) error
	// KickOutbox wakes the outbox loop; Wake also wakes those who wait for mail. Neither blocks.
	KickOutbox()
	Wake()
	// Reached is told the outcome of each pull (nil: the relay answered it), so the host knows
	// whether the relay is reachable (rows waiting for it go when it answers again).
	Reached(ctx context.Context, err error)
	// Daemon reports whether the daemon serves the host now (RelayStatus.Daemon).
	Daemon() bool
	// ResendReceipts queues again, in tx, the current delivery receipt of each local copy of
	// message msg from host origin whose last receipt is no longer on its way, and returns how
	// many it queued.
	ResendReceipts(tx *bbolt.Tx, msg, origin string) (int, error)
}

// Peer is a pinned peer as the relay side sees it.
type Peer struct {
	Host    string
	Key     string   // its current host key
	Retired []string // its retired host keys
}

// peerWithKey finds the peer whose current or retired host key is key.
func peerWithKey(peers []Peer, key string) (Peer, bool) {
	for _, p := range peers {
		if p.Key == key || slices.Contains(p.Retired, key) {
			return p, true
		}
	}
	return Peer{}, false
}

// Config is what New needs: the host's store (and the packages' stores in it), its identity,
// clock and logger, and the Host.
type Config struct {
	DB         *bbolt.DB
	Outbox     *outbox.Store
	Quarantine *quarantine.Store
	Positions  *checkpoint.Store
	Name       string // the host's name
	Key        mbx.SigningKey
	EncPub     string // the host's enc key
	Clock      func() time.Time
	Logger     *slog.Logger
	Host       Host
	// Hold, when set, is asked before each use of the relay: an error holds the relay (Conn
	// returns it), as the host's key rotation does until its relay steps are done.
	Hold func() error
	// Client is the template of the relay client's options (HTTPClient, RetryMax, RetryWait);
	// Clock, Logger and CA are the link's. The zero value is right for production.
	Client relayclient.Options
}

// Link is a host's use of its pinned relay. All methods are safe for concurrent use.
type Link struct {
	db    *bbolt.DB
	ob    *outbox.Store
	quar  *quarantine.Store
	rpos  *checkpoint.Store
	name  string
	key   mbx.SigningKey
	enc   string
	clock func() time.Time
	log   *slog.Logger
	host  Host
	hold  func() error
	copts relayclient.Options

	mu       sync.Mutex
	conn     *Conn
	problems map[string]string // op → problemKey of the problem last recorded (mirror of the record)
	epoch    string            // the epoch last recorded for conn (mirror of the record)
	// pausedUntil: no push goes to the relay before then (its Retry-After, a rate refusal).
	pausedUntil time.Time
	recv        *checkpoint.Receiver // the daemon's (or a test's) receiver for conn
	pace        linkPace             // the push pacer (link_pace.go)

	changed chan struct{} // the pin changed or relay use stopped: the daemon restarts its loops
	keep    chan struct{} // run the enrolment and publications now (peers changed, re-enrol)
	keepMu  sync.Mutex    // one maintenance at a time
	// enrolled counts the enrolments made (under keepMu): a forced re-enrolment asked for
	// before one of them completed is already answered by it.
	enrolled atomic.Uint64
}

// New returns the Link of a host.
func New(c Config) *Link {
	return &Link{db: c.DB, ob: c.Outbox, quar: c.Quarantine, rpos: c.Positions, name: c.Name, key: c.Key,
		enc: c.EncPub, clock: c.Clock, log: c.Logger, host: c.Host, hold: c.Hold, copts: c.Client,
		changed: make(chan struct{}, 1), keep: make(chan struct{}, 1)}
}

// clientOptions are the relay client's options: the template with the link's clock and logger
// and the CA bundle ca.
func (l *Link) clientOptions(ca string) *relayclient.Options {
	o := l.copts
	o.Clock, o.Logger, o.CA = l.clock, l.log, []byte(ca)
	return &o
}

func poke(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// KeepSoon asks the daemon to run the enrolment and publications now (the peers changed: the
// sender allowlist names them). It never blocks.
func (l *Link) KeepSoon() { poke(l.keep) }

// Conn is the pinned relay in use: its pin and a client for it, Client for a relay pinned by
// its key, V1 for one that speaks only v1 (relay set --allow-v1; Pin.RelayKey is then empty).
// Exactly one of the two is set.
type Conn struct {
	Pin    relayclient.Pin
	Client *relayclient.Client
	V1     *relayclient.V1
}

// heldError is Config.Hold's answer as Conn returns it: a wait, not a failure.
type heldError struct{ err error }

func (e heldError) Error() string { return e.err.Error() }
func (e heldError) Unwrap() error { return e.err }

// Conn returns the connection to the pinned relay, or an error when none is pinned, relay use
// is stopped or held (ErrNoRelay, ErrRelayStopped, Config.Hold's).
func (l *Link) Conn() (*Conn, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.hold != nil {
		if err := l.hold(); err != nil {
			return nil, heldError{err}
		}
	}
	if l.conn != nil {
		return l.conn, nil
	}
	s, err := l.load()
	if err != nil {
		return nil, err
	}
	if s == nil {
		return nil, ErrNoRelay
	}
	if s.KeyChange != nil {
		return nil, ErrRelayStopped
	}
	conn := &Conn{Pin: s.Pin()}
	if s.V1 {
		conn.V1, err = relayclient.NewV1(s.URL, l.name, l.key, l.clientOptions(s.CA))
	} else {
		conn.Client, err = relayclient.New(s.Pin(), l.name, l.key, l.clientOptions(s.CA))
	}
	if err != nil {
		return nil, err
	}
	l.conn = conn
	l.recv = nil
	l.epoch = s.Epoch
	l.problems = map[string]string{}
	for op, p := range s.Problems {
		l.problems[op] = problemKey(p)
	}
	return l.conn, nil
}

// Usable returns the connection when rows may go to the relay now, else nil.
func (l *Link) Usable() *Conn {
	c, err := l.Conn()
	if err != nil || (c.Client != nil && c.Client.Stopped() != nil) {
		return nil
	}
	return c
}

// Drop forgets the connection (the pin changed, relay use stopped, a hold ended) and tells the
// daemon, which starts its relay loops again.
func (l *Link) Drop() {
	l.mu.Lock()
	l.conn, l.recv = nil, nil
	l.mu.Unlock()
	poke(l.changed)
}

// failed looks at an error of a relay operation: a changed relay key stops relay use (and is
// recorded for the owner), a refused hop (401, or 403: revoked or denied) asks for a re-enrolment. It records the problem of op
// and returns err.
func (l *Link) failed(c *Conn, op string, err error) error {
	var kc *relayclient.KeyChangedError
	if errors.As(err, &kc) {
		l.keyChanged(c, kc)
	}
	if errors.Is(err, relayclient.ErrNotEnrolled) || errors.Is(err, relayclient.ErrForbidden) {
		if c.V1 != nil {
			l.forgetV1Enrolment(c) // a v1 relay has no info to tell: the refusal is the news
		}
		poke(l.keep)
	}
	l.problem(c, op, err)
	return err
}

// keyChanged records that the relay at c served another key and stops relay use.
func (l *Link) keyChanged(c *Conn, kc *relayclient.KeyChangedError) {
	now := mbx.ISOTime(l.clock())
	ran, err := l.update(c.Pin, func(_ *bbolt.Tx, s *Record) error {
		if s.KeyChange == nil {
			s.KeyChange = &api.RelayKeyChange{Pinned: kc.Pinned, Served: kc.Served, At: now}
		}
		return nil
	})
	if err != nil {
		l.log.Error("recording a relay key change", logkey.Relay, c.Pin.URL, logkey.Err, err)
	}
	if ran {
		l.log.Error("relay key changed: relay use stopped until the owner confirms the new key with `agentmbx relay set`",
			logkey.Relay, c.Pin.URL, logkey.Pinned, kc.Pinned, logkey.Served, kc.Served)
	}
	l.Drop()
}

// problem records the outcome of op: err nil clears its problem. It writes only when the
// recorded problem changes.
func (l *Link) problem(c *Conn, op string, err error) {
	var p api.RelayProblem
	if err != nil {
		p = api.RelayProblem{Op: op, Error: clip(err.Error(), 500), Kind: ProblemKind(err)}
	}
	msg, key := p.Error, problemKey(p)
	l.mu.Lock()
	same := l.conn == c && l.problems != nil && l.problems[op] == key
	l.mu.Unlock()
	if same {
		return
	}
	now := mbx.ISOTime(l.clock())
	_, werr := l.update(c.Pin, func(_ *bbolt.Tx, s *Record) error {
		if msg == "" {
			delete(s.Problems, op)
			return nil
		}
		if s.Problems == nil {
			s.Problems = map[string]api.RelayProblem{}
		}
		p.At = now
		s.Problems[op] = p
		return nil
	})
	if werr != nil {
		l.log.Error("recording a relay problem", logkey.Op, op, logkey.Err, werr)
		return
	}
	l.mu.Lock()
	if l.conn == c && l.problems != nil {
		if msg == "" {
			delete(l.problems, op)
		} else {
			l.problems[op] = key
		}
	}
	l.mu.Unlock()
}

// recordOutcome records the outcome of op (failed for a failure, which also stops relay use on a
// changed key) and returns err.
func (l *Link) recordOutcome(c *Conn, op string, err error) error {
	if err != nil {
		return l.failed(c, op, err)
	}
	l.problem(c, op, nil)
	return nil
}

// epochSeen takes note of the epoch a relay answer carried. A change from a known epoch means
// the relay's store may have lost what it accepted (a restore, a reset): every relay-accepted row
// at this relay is flagged for a re-push, the receive position goes back to 0 in the new epoch,
// and the enrolment is redone (docs/design.md: Epochs, restarts and restores, Enrolment and
// publications). It reports whether the epoch changed.
func (l *Link) epochSeen(c *Conn, epoch string) bool {
	if epoch == "" || len(epoch) > checkpoint.MaxEpochLen {
		return false
	}
	l.mu.Lock()
	known := l.conn == c && l.epoch == epoch
	l.mu.Unlock()
	if known {
		return false
	}
	changed, repushed, resent := false, 0, 0
	_, err := l.update(c.Pin, func(tx *bbolt.Tx, s *Record) error {
		changed, repushed, resent = false, 0, 0
		if s.Epoch == epoch {
			return nil
		}
		old := s.Epoch
		s.Epoch = epoch
		if old == "" {
			return nil
		}
		changed = true
		s.Enrolled, s.EncAd, s.Senders = nil, nil, nil
		n, err := l.ob.In(tx).RepushRelay(c.Pin.URL, epoch)
		if err != nil {
			return err
		}
		repushed = n
		if resent, err = l.resendLostReceiptsTx(tx, c.Pin.URL, epoch, s.LimitsOrDefault().Retention()); err != nil {
			return err
		}
		pos, err := l.rpos.In(tx).Position(c.Pin.URL)
		if err != nil {
			return err
		}
		if pos.Epoch != epoch {
			if _, _, err := l.rpos.In(tx).Reset(c.Pin.URL, epoch, checkpoint.ResetEpochChanged); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		l.log.Error("recording the relay epoch", logkey.Relay, c.Pin.URL, logkey.Err, err)
		return false
	}
	l.mu.Lock()
	if l.conn == c {
		l.epoch = epoch
	}
	l.mu.Unlock()
	if changed {
		l.log.Warn("relay epoch changed: re-pushing relay-accepted rows, pulling again from 0, enrolling again",
			logkey.Relay, c.Pin.URL, logkey.Epoch, epoch, logkey.Repush, repushed, logkey.Resent, resent)
		l.afterEpochChange()
	}
	return changed
}

// afterEpochChange wakes what an epoch change concerns: the outbox (re-pushes), the receiver and
// the enrolment.
func (l *Link) afterEpochChange() {
	l.host.KickOutbox()
	poke(l.keep)
	l.kickReceiver()
}

// probeTimeout bounds a Probe.
const probeTimeout = 10 * time.Second

// ErrProbedByPull is Probe's answer for a v1 relay: its next pull was brought forward, and the
// host hears how it went from that pull (Host.Reached).
var ErrProbedByPull = errors.New("relay probed by its next pull")

// Probe asks the relay in use for its info: one small signed request, never a long poll, so a
// relay that comes back is seen at once (a pull would be held there until mail arrives). ok is
// false when no relay is in use (nothing to probe); a v1 relay, which has no info, gets its next
// pull brought forward instead (ErrProbedByPull).
func (l *Link) Probe(ctx context.Context) (ok bool, err error) {
	c, err := l.Conn()
	if err != nil {
		return false, nil
	}
	if c.V1 != nil {
		return l.PullNow(), ErrProbedByPull
	}
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	_, err = c.Client.Info(ctx)
	return true, err
}

// PullNow brings the receiver's next pull forward (a probe of a relay that stopped answering:
// Host.Reached hears how it went). It reports false when no receiver runs in a daemon.
func (l *Link) PullNow() bool {
	l.mu.Lock()
	r := l.recv
	l.mu.Unlock()
	if r == nil || !l.host.Daemon() {
		return false
	}
	r.Kick()
	return true
}

// kickReceiver wakes the receiver of the connection, if one runs.
func (l *Link) kickReceiver() {
	l.mu.Lock()
	r := l.recv
	l.mu.Unlock()
	if r != nil {
		r.Kick()
	}
}

// clip shortens s to at most n bytes, marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// Pusher returns the pusher of the connection c: it records the push's problems and the epochs
// its accept statements name.
func (l *Link) Pusher(c *Conn) *Pusher {
	lim := mbx.DefaultLimits()
	if s, err := l.load(); err == nil && s != nil {
		lim = s.LimitsOrDefault()
	}
	return &Pusher{Client: c.Client, V1: l.v1Pusher(c), Pin: c.Pin, Limits: lim, Logger: l.log, Pacer: l.pacer(c, lim),
		Observe: func(err error) {
			if err != nil {
				_ = l.failed(c, OpPush, err) // recorded; nothing waits on this error
			} else {
				l.problem(c, OpPush, nil)
			}
		},
		EpochSeen: func(epoch string) { l.epochSeen(c, epoch) },
	}
}
