package host

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/outbox"
	"github.com/agentmbx/agentmbx/rotation"
)

// The host's side of package rotation (docs/design.md: Host key rotation): a rotation.Rotation
// runs this host's own rotation and applies its peers'; rotationHost is what it needs of this
// host: the peers store and the outbox loop's recording of a push. Open finishes a swap a crash
// interrupted (rotation.FinishSwap) and the relay link asks the rotation before each use.

// homeOf is the host home in dir as a rotation sees it.
func homeOf(dir string) rotation.Home {
	return rotation.Home{Dir: dir, HostKey: HostKeyFile, EncKey: EncKeyFile, RetiredEnc: RetiredEnc}
}

// PrepareRotation starts a rotation of the host in dir and does its local part
// (rotation.Prepare). No daemon may hold the home (api.ErrLocked); an earlier rotation not done yet
// is refused (rotation.ErrInProgress). It returns the signed record.
func PrepareRotation(dir string, opts rotation.Options) (mbx.SignedRotation, error) {
	if opts.LockTimeout <= 0 {
		opts.LockTimeout = time.Second
	}
	fail := func(err error) (mbx.SignedRotation, error) {
		return mbx.SignedRotation{}, fmt.Errorf("host: rotate: %w", err)
	}
	if _, _, _, err := readKeys(dir); err != nil {
		return fail(err)
	}
	db, err := openStateDB(dir, opts.LockTimeout, false)
	if errors.Is(err, bolterrors.ErrTimeout) {
		return fail(api.ErrLocked)
	} else if err != nil {
		return fail(err)
	}
	defer db.Close()
	var name string
	if err := db.View(func(tx *bbolt.Tx) error {
		if m := tx.Bucket(bucketMeta); m != nil {
			name = string(m.Get(metaHost))
		}
		return nil
	}); err != nil {
		return fail(err)
	}
	s, err := rotation.Prepare(homeOf(dir), db, name, func(tx *bbolt.Tx) ([]string, error) {
		ps, err := peersTx(tx)
		names := make([]string, len(ps))
		for i, p := range ps {
			names[i] = p.Host
		}
		return names, err
	}, opts)
	if err != nil {
		return fail(err)
	}
	return s, nil
}

// Rotation is this host's key rotations: `id rotate` continues its own with it.
func (h *Host) Rotation() *rotation.Rotation { return h.rot }

// rotationHost is the rotation.Host of a Host.
type rotationHost struct{ *Host }

var _ rotation.Host = rotationHost{}

// Peers lists the pinned peers, read in tx.
func (rh rotationHost) Peers(tx *bbolt.Tx) ([]rotation.Peer, error) {
	ps, err := peersTx(tx)
	out := make([]rotation.Peer, len(ps))
	for i, p := range ps {
		out[i] = rotation.Peer{Host: p.Host, HostPubkey: p.HostPubkey, EncPub: p.EncPub, Addr: p.Addr,
			RetiredKeys: p.RetiredKeys, RotatedAt: p.RotatedAt}
	}
	return out, err
}

// Repin pins a peer's rotated keys (pinPeerTx); a pin refused for its keys is a refused rotation.
func (rh rotationHost) Repin(tx *bbolt.Tx, p rotation.Peer) (int, error) {
	rec, err := peerTx(tx, p.Host)
	if err != nil {
		return 0, err
	}
	rec.HostPubkey, rec.EncPub, rec.RetiredKeys, rec.RotatedAt = p.HostPubkey, p.EncPub, p.RetiredKeys, p.RotatedAt
	released, err := rh.pinPeerTx(tx, &rec)
	if errors.Is(err, api.ErrPeerKeyInUse) || errors.Is(err, api.ErrPeerKeyMismatch) {
		return 0, fmt.Errorf("%w: %v", rotation.ErrRefused, err)
	}
	return released, err
}

func (rh rotationHost) Repinned(released int) { rh.afterPin(released) }

func (rh rotationHost) RecordRelayPush(ctx context.Context, host string, rows []outbox.Row, out []outbox.Outcome) {
	rh.record(ctx, host, rows, out, outbox.TransportRelay)
}
