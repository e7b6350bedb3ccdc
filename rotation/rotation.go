package rotation

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/bbolt"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/checkpoint"
	"github.com/agentmbx/agentmbx/internal/logkey"
	"github.com/agentmbx/agentmbx/lan"
	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/outbox"
	"github.com/agentmbx/agentmbx/relaylink"
)

// Host is what a Rotation needs of the host it belongs to: its peers store and the outbox
// loop's recording of a push.
type Host interface {
	// Peers lists the pinned peers, read in tx.
	Peers(tx *bbolt.Tx) ([]Peer, error)
	// Repin pins, in tx, the keys of p (a pinned peer, rotated: new host and enc key, the old
	// host key among RetiredKeys, RotatedAt), rebinding its active outbox rows, and returns how
	// many quarantined relay items the new pin released. When the peers store refuses the keys
	// (pinned for another peer), the error wraps ErrRefused.
	Repin(tx *bbolt.Tx, p Peer) (int, error)
	// Repinned is told, after the commit, that Repin changed a pin (the relay's allowlist and
	// the loops are due).
	Repinned(released int)
	// RecordRelayPush records what a push of rows to host through the relay did, as the outbox
	// loop does.
	RecordRelayPush(ctx context.Context, host string, rows []outbox.Row, out []outbox.Outcome)
}

// Peer is a pinned peer as a rotation sees it.
type Peer struct {
	Host        string
	HostPubkey  string
	EncPub      string
	Addr        string   // LAN host:port, "" when unknown
	RetiredKeys []string // its retired host keys
	RotatedAt   string   // the iat of its rotation applied last ("" for none)
}

// Config is what Open needs: the host's home and store (and the packages' stores in it), its
// identity, clock, randomness and logger, its relay link, an HTTP client for the LAN and the
// Host.
type Config struct {
	Home      Home
	DB        *bbolt.DB
	Outbox    *outbox.Store
	Positions *checkpoint.Store
	Relay     *relaylink.Link
	Name      string
	Key       mbx.SigningKey
	Enc       []mbx.EncKey // the current enc key first, then the retired ones
	Clock     func() time.Time
	Rand      io.Reader
	Logger    *slog.Logger
	LAN       lan.Doer
	Host      Host
}

// Rotation is a host's key rotations: its own (run) and its peers' (apply). All methods are
// safe for concurrent use.
type Rotation struct {
	c      Config
	gate   atomic.Bool // the relay steps before the reset are not done: no other relay use
	mu     sync.Mutex  // one RunOnce at a time
	oldPub string      // the old host key of the stored rotation ("" for none)
}

// Bounds of the rotation loop.
const (
	retryFirst = time.Second
	retryMax   = time.Minute
	stepBudget = 30 * time.Second // one relay or LAN request
)

// Open returns the Rotation of a host, with the relay held when the stored rotation's relay
// steps are not done yet.
func Open(c Config) (*Rotation, error) {
	if len(c.Enc) == 0 {
		return nil, errors.New("rotation: no enc key")
	}
	r := &Rotation{c: c}
	st, err := r.Load()
	if err != nil {
		return nil, fmt.Errorf("rotation: %w", err)
	}
	r.gate.Store(st != nil && st.Done == "" && st.Relay.gating())
	if st != nil {
		r.oldPub = st.Signed.Rec.OldPub
	}
	return r, nil
}

// Load reads the stored rotation (nil when the host never rotated).
func (r *Rotation) Load() (*State, error) { return load(r.c.DB) }

// Hold is the relay link's hold (relaylink.Config.Hold): ErrRelayRotating until the relay steps
// up to the receive position's reset are done.
func (r *Rotation) Hold() error {
	if r.gate.Load() {
		return ErrRelayRotating
	}
	return nil
}

// VerifyAcceptance checks a relay accept statement for row cur against this host's key, or the
// old key of its rotation (the receipts the rotation pushes under the old key).
func (r *Rotation) VerifyAcceptance(cur outbox.Row, o outbox.Outcome) error {
	err := relaylink.VerifyAcceptance(cur, o, r.c.Key.PublicKey())
	if err != nil && r.oldPub != "" && relaylink.VerifyAcceptance(cur, o, r.oldPub) == nil {
		return nil
	}
	return err
}

// Run runs RunOnce until the rotation is done or ctx ends, waiting between tries (1 s doubling
// to 1 min). The daemon runs it.
func (r *Rotation) Run(ctx context.Context) {
	wait := retryFirst
	for {
		done, err := r.RunOnce(ctx)
		if done || ctx.Err() != nil {
			return
		}
		if err != nil {
			r.c.Logger.Warn("host key rotation: will retry", logkey.Err, err, "in", wait)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, retryMax)
	}
}

// Continue runs the steps not done yet, once, and returns the progress (nil when the host never
// rotated): what `agentmbx id rotate` does right after Prepare.
func (r *Rotation) Continue(ctx context.Context) (*api.Rotation, error) {
	_, err := r.RunOnce(ctx)
	st, serr := r.Status()
	if serr != nil {
		return nil, serr
	}
	return st, err
}

// Status is the progress of this host's last rotation (nil when it never rotated).
func (r *Rotation) Status() (*api.Rotation, error) {
	st, err := r.Load()
	if err != nil || st == nil {
		return nil, err
	}
	return st.API(), nil
}

// RunOnce runs every step not done yet, once, and reports whether the rotation is done (true
// too when there is none). The error is the first step that failed this time.
func (r *Rotation) RunOnce(ctx context.Context) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	st, err := r.Load()
	if err != nil || st == nil || st.Done != "" {
		return err == nil, err
	}
	var first error
	if !st.Relay.relayDone() {
		first = r.rotateAtRelay(ctx, st)
		if first != nil {
			r.note(func(st *State) {
				if st.Relay != nil {
					st.Relay.LastError = clip(first.Error(), 300)
				}
			})
		}
	}
	if err := r.rotateLAN(ctx, st); first == nil {
		first = err
	}
	done := false
	err = r.update(func(tx *bbolt.Tx, st *State) error {
		peers, err := r.c.Host.Peers(tx)
		if err != nil {
			return err
		}
		if !st.Relay.relayDone() {
			return nil
		}
		for _, p := range peers {
			if pr := st.Peers[p.Host]; pr != nil && !peerDone(pr, p, st.Relay) {
				return nil
			}
		}
		st.Done, done = mbx.ISOTime(r.c.Clock()), true
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("host: rotation: %w", err)
	}
	if done {
		r.c.Logger.Info("host key rotation done", "old", mbx.Fingerprint(st.Signed.Rec.OldPub), logkey.Fingerprint, r.c.Key.Fingerprint())
	}
	return done, first
}

// peerDone: the peer took the LAN record, or the relay holds its notice, or it has no way left
// (no LAN address, and no relay or a final notice refusal).
func peerDone(pr *PeerProgress, p Peer, rel *RelayProgress) bool {
	switch {
	case pr.LAN != "" || pr.Noticed():
		return true
	case p.Addr != "":
		return false
	default:
		return rel == nil || pr.Notice != ""
	}
}

func (r *Rotation) update(fn func(tx *bbolt.Tx, st *State) error) error { return update(r.c.DB, fn) }

// note records fn's change of the stored rotation, logging a failure to.
func (r *Rotation) note(fn func(st *State)) {
	err := r.update(func(_ *bbolt.Tx, st *State) error { fn(st); return nil })
	if err != nil {
		r.c.Logger.Error("host key rotation: record progress", logkey.Err, err)
	}
}

// peers lists the pinned peers.
func (r *Rotation) peers() ([]Peer, error) {
	var out []Peer
	err := r.c.DB.View(func(tx *bbolt.Tx) error {
		var err error
		out, err = r.c.Host.Peers(tx)
		return err
	})
	return out, err
}
