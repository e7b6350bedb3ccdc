package host

import (
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	"go.etcd.io/bbolt"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/internal/failpoint"
	"github.com/agentmbx/agentmbx/internal/fsutil"
	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/relaylink"
)

// This host's own key rotation (docs/design.md: Host key rotation; T030).
//
// PrepareRotation runs on a home no daemon holds: it makes a new host key and enc key, writes
// them to host.key.next and enc.key.next, signs the rotation record with the old and the new key,
// and stores it with one progress entry per paired peer and one for the pinned relay (bucket
// "rotation", key "current", step "prepared"). Then it swaps the keys: the old host key is
// appended to host.retired and the old enc key to enc.retired, enc.key and host.key are replaced
// (each file atomically), and the step becomes "swapped". A crash anywhere in between is finished
// by the next Open, which redoes the swap (every part of it is idempotent). The old keys are never
// deleted: the old enc key opens mail sealed to it before the peers learnt the new one, and the
// old host key signs the relay notices (below) even after the swap.
//
// The network steps run on the open host (continueRotation; the daemon runs it until it is done,
// `id rotate` once), each recorded when it is done:
//
//  1. relay notices: when a relay is pinned, each paired peer gets a rotation notice relay item
//     (mbx.SealRotationNotice) pushed under the old key, which the relay still has enrolled. A
//     peer that reaches this host only through the relay learns the new key from it, in its
//     queue's order, before any item signed by the new key;
//  2. relay rotate: POST /v2/relay/rotate moves the enrolment, the queue and the allowlists to
//     the new key and revokes the old one;
//  3. the receive position for the relay is reset to 0 (its queue was re-sequenced);
//  4. enrolment, enc-key ad and sender allowlist are published under the new key, and the
//     relay's confirmations are checked (the enrolment cache names the new key, the ad the new
//     enc key, the allowlist today's peers).
//
// Until step 3 is done the host does not use the relay otherwise (relaylink.Link.Conn answers
// ErrRelayRotating), so nothing enrols the new key beside the rotation. Independently, every
// peer with a LAN address gets POST /v1/rotate until it answers. A peer is done when its LAN
// answer or its relay notice is in (or it has neither way and its failure is recorded), and the
// rotation is done when the relay steps and every peer are.

// Files of a rotation in the host home.
const (
	RetiredHost = "host.retired" // JSON array of mbx.KeyFile: this host's retired host keys
	nextHostKey = "host.key.next"
	nextEncKey  = "enc.key.next"
)

// Failpoints of a rotation (crash tests).
const (
	FailRotatePrepared     = "host.rotate.prepared"      // record stored, keys not swapped
	FailRotateEncSwapped   = "host.rotate.enc-swapped"   // enc.key replaced, host.key not yet
	FailRotateSwapped      = "host.rotate.swapped"       // both keys swapped and recorded
	FailRotateNoticed      = "host.rotate.noticed"       // relay notices accepted and recorded
	FailRotateRelayRotated = "host.rotate.relay-rotated" // the relay answered the rotate, not recorded
	FailRotateReset        = "host.rotate.reset"         // receive position reset and recorded
	FailRotateLANSent      = "host.rotate.lan-sent"      // a peer took the LAN record, not recorded
)

// Steps of the local part.
const (
	rotPrepared = "prepared"
	rotSwapped  = "swapped"
)

var (
	bucketRotation = []byte("rotation")
	rotationKey    = []byte("current")
)

// ErrRotationInProgress is returned by PrepareRotation while an earlier rotation is not done.
var ErrRotationInProgress = newErr(api.CodeConflict, "a host key rotation is in progress",
	"start the daemon to finish it (`agentmbx id` shows its progress)")

// ErrRelayRotating is returned for relay use while the rotation's relay steps are not done.
var ErrRelayRotating = newErr(api.CodeUnavailable, "the relay link waits for the host key rotation",
	"the daemon finishes the rotation at the relay; `agentmbx id` shows its progress")

// rotationState is the stored rotation.
type rotationState struct {
	Signed  mbx.SignedRotation       `json:"signed"`
	Step    string                   `json:"step"`
	Started string                   `json:"started"`
	Relay   *rotationRelay           `json:"relay,omitempty"`
	Peers   map[string]*rotationPeer `json:"peers"`
	Done    string                   `json:"done,omitempty"`
}

// rotationRelay is the progress at the relay pinned when the rotation started.
type rotationRelay struct {
	URL       string `json:"url"`
	RelayKey  string `json:"relay_pubkey"`
	Noticed   string `json:"noticed,omitempty"` // every notice answered
	Rotated   string `json:"rotated,omitempty"` // the relay moved the queue
	Moved     int64  `json:"moved"`
	Reset     string `json:"reset,omitempty"`   // receive position reset
	Checked   string `json:"checked,omitempty"` // publications confirmed under the new key
	Note      string `json:"note,omitempty"`
	LastError string `json:"last_error,omitempty"`
}

// rotationPeer is the progress of one peer.
type rotationPeer struct {
	LAN       string `json:"lan,omitempty"`    // "applied", "had it", "refused: …"
	Notice    string `json:"notice,omitempty"` // "accepted", "duplicate", "rejected: …"
	LastError string `json:"last_error,omitempty"`
	Attempts  int    `json:"attempts,omitempty"`
}

func (r *rotationRelay) relayDone() bool { return r == nil || r.Checked != "" }

// gating reports whether the relay must not be used otherwise yet.
func (r *rotationRelay) gating() bool { return r != nil && r.Reset == "" }

func (p *rotationPeer) noticed() bool { return p.Notice == "accepted" || p.Notice == "duplicate" }

func loadRotationTx(tx *bbolt.Tx) (*rotationState, error) {
	b := tx.Bucket(bucketRotation)
	if b == nil {
		return nil, nil
	}
	var s rotationState
	found, err := getJSON(b, rotationKey, &s)
	if err != nil || !found {
		return nil, err
	}
	if s.Peers == nil {
		s.Peers = map[string]*rotationPeer{}
	}
	return &s, nil
}

func saveRotationTx(tx *bbolt.Tx, s *rotationState) error {
	b, err := tx.CreateBucketIfNotExists(bucketRotation)
	if err != nil {
		return err
	}
	return putJSON(b, rotationKey, s)
}

// RotateOptions configure PrepareRotation.
type RotateOptions struct {
	Rand        io.Reader // key randomness (default crypto/rand)
	Clock       func() time.Time
	LockTimeout time.Duration // default 1 s
}

// PrepareRotation starts a rotation of the host in dir (no daemon may hold it: ErrLocked) and
// does its local part: new keys, the signed record, the swap. It refuses while an earlier
// rotation is not done (ErrRotationInProgress). It returns the signed record.
func PrepareRotation(dir string, opts RotateOptions) (mbx.SignedRotation, error) {
	if opts.Rand == nil {
		opts.Rand = rand.Reader
	}
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	if opts.LockTimeout <= 0 {
		opts.LockTimeout = time.Second
	}
	fail := func(err error) (mbx.SignedRotation, error) {
		return mbx.SignedRotation{}, fmt.Errorf("host: rotate: %w", err)
	}
	old, _, _, err := readKeys(dir)
	if err != nil {
		return fail(err)
	}
	db, err := bbolt.Open(filepath.Join(dir, StateFile), 0o600, &bbolt.Options{Timeout: opts.LockTimeout})
	if err != nil {
		if errors.Is(err, bbolt.ErrTimeout) {
			return fail(ErrLocked)
		}
		return fail(err)
	}
	defer db.Close()
	if err := finishSwap(dir, db); err != nil {
		return fail(err)
	}
	var st *rotationState
	if err := db.View(func(tx *bbolt.Tx) error {
		var err error
		st, err = loadRotationTx(tx)
		return err
	}); err != nil {
		return fail(err)
	}
	if st != nil && st.Done == "" {
		return fail(ErrRotationInProgress)
	}
	nk, err := mbx.GenerateSigningKey(opts.Rand)
	if err != nil {
		return fail(err)
	}
	ne, err := mbx.GenerateEncKey(opts.Rand)
	if err != nil {
		return fail(err)
	}
	if err := writeKeyFile(filepath.Join(dir, nextEncKey), ne.File()); err != nil {
		return fail(err)
	}
	if err := writeKeyFile(filepath.Join(dir, nextHostKey), nk.File()); err != nil {
		return fail(err)
	}
	var signed mbx.SignedRotation
	err = db.Update(func(tx *bbolt.Tx) error {
		name := string(tx.Bucket(bucketMeta).Get(metaHost))
		var err error
		if signed, err = mbx.SignRotation(name, old, nk, ne.PublicKey(), opts.Clock()); err != nil {
			return err
		}
		st := &rotationState{Signed: signed, Step: rotPrepared, Started: mbx.ISOTime(opts.Clock()), Peers: map[string]*rotationPeer{}}
		peers, err := peersTx(tx)
		if err != nil {
			return err
		}
		for _, p := range peers {
			st.Peers[p.Host] = &rotationPeer{}
		}
		rs, err := relaylink.LoadTx(tx)
		if err != nil {
			return err
		}
		if rs != nil {
			st.Relay = &rotationRelay{URL: rs.URL, RelayKey: rs.RelayKey}
		}
		return saveRotationTx(tx, st)
	})
	if err != nil {
		return fail(err)
	}
	if err := failpoint.Inject(FailRotatePrepared); err != nil {
		return fail(err)
	}
	if err := finishSwap(dir, db); err != nil {
		return fail(err)
	}
	return signed, nil
}

// finishSwap does the swap of a prepared rotation (nothing when there is none): retire the old
// keys, install the new ones, record the step. Every part is idempotent.
func finishSwap(dir string, db *bbolt.DB) error {
	var st *rotationState
	if err := db.View(func(tx *bbolt.Tx) error {
		var err error
		st, err = loadRotationTx(tx)
		return err
	}); err != nil {
		return err
	}
	if st == nil {
		return nil
	}
	if st.Step != rotPrepared {
		return removeNextKeys(dir) // left by a crash right after the swap, or by an unfinished prepare
	}
	rec := st.Signed.Rec
	cur, curEnc, _, err := readKeys(dir)
	if err != nil {
		return err
	}
	if cur.PublicKey() != rec.NewPub {
		nk, ne, err := readNextKeys(dir, rec)
		if err != nil {
			return err
		}
		if cur.PublicKey() != rec.OldPub {
			return fmt.Errorf("%w: %s is neither the rotation's old nor its new key", ErrCorrupt, HostKeyFile)
		}
		if err := retireKey(dir, RetiredHost, cur.File()); err != nil {
			return err
		}
		if curEnc.PublicKey() != rec.NewEncPub {
			if err := retireKey(dir, RetiredEnc, curEnc.File()); err != nil {
				return err
			}
			if err := writeKeyFile(filepath.Join(dir, EncKeyFile), ne.File()); err != nil {
				return err
			}
		}
		if err := failpoint.Inject(FailRotateEncSwapped); err != nil {
			return err
		}
		if err := writeKeyFile(filepath.Join(dir, HostKeyFile), nk.File()); err != nil {
			return err
		}
	}
	err = db.Update(func(tx *bbolt.Tx) error {
		st, err := loadRotationTx(tx)
		if err != nil || st == nil {
			return err
		}
		st.Step = rotSwapped
		return saveRotationTx(tx, st)
	})
	if err != nil {
		return err
	}
	if err := failpoint.Inject(FailRotateSwapped); err != nil {
		return err
	}
	return removeNextKeys(dir)
}

// removeNextKeys removes host.key.next and enc.key.next (once swapped, or never recorded).
func removeNextKeys(dir string) error {
	for _, f := range []string{nextHostKey, nextEncKey} {
		if err := os.Remove(filepath.Join(dir, f)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

// readNextKeys reads host.key.next and enc.key.next and checks them against the record.
func readNextKeys(dir string, rec mbx.RotationRecord) (mbx.SigningKey, mbx.EncKey, error) {
	hb, err := os.ReadFile(filepath.Join(dir, nextHostKey))
	if err != nil {
		return mbx.SigningKey{}, mbx.EncKey{}, fmt.Errorf("%w: rotation prepared but %s unreadable: %w", ErrCorrupt, nextHostKey, err)
	}
	nk, err := mbx.SigningKeyFromFile(hb)
	if err != nil || nk.PublicKey() != rec.NewPub {
		return mbx.SigningKey{}, mbx.EncKey{}, fmt.Errorf("%w: %s is not the rotation's new key", ErrCorrupt, nextHostKey)
	}
	eb, err := os.ReadFile(filepath.Join(dir, nextEncKey))
	if err != nil {
		return mbx.SigningKey{}, mbx.EncKey{}, fmt.Errorf("%w: rotation prepared but %s unreadable: %w", ErrCorrupt, nextEncKey, err)
	}
	ne, err := mbx.EncKeyFromFile(eb)
	if err != nil || ne.PublicKey() != rec.NewEncPub {
		return mbx.SigningKey{}, mbx.EncKey{}, fmt.Errorf("%w: %s is not the rotation's new enc key", ErrCorrupt, nextEncKey)
	}
	return nk, ne, nil
}

// retireKey appends f to the JSON array of key files in dir/name (atomically; once).
func retireKey(dir, name string, f mbx.KeyFile) error {
	files, err := readKeyList(dir, name)
	if err != nil {
		return err
	}
	for _, o := range files {
		if o.PrivateKey == f.PrivateKey {
			return nil
		}
	}
	b, err := json.Marshal(append(files, f))
	if err != nil {
		return err
	}
	return fsutil.WriteFileAtomic(filepath.Join(dir, name), append(b, '\n'), 0o600)
}

// readKeyList reads a JSON array of key files (none when the file does not exist).
func readKeyList(dir, name string) ([]mbx.KeyFile, error) {
	b, err := os.ReadFile(filepath.Join(dir, name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	var files []mbx.KeyFile
	if err := json.Unmarshal(b, &files); err != nil {
		return nil, fmt.Errorf("%s: %w: not a JSON array of key files", name, ErrCorrupt)
	}
	return files, nil
}

// retiredHostKey returns this host's retired host key whose public key is pub.
func (h *Host) retiredHostKey(pub string) (mbx.SigningKey, error) {
	files, err := readKeyList(h.dir, RetiredHost)
	if err != nil {
		return mbx.SigningKey{}, err
	}
	for _, f := range files {
		b, err := json.Marshal(f)
		if err != nil {
			return mbx.SigningKey{}, err
		}
		k, err := mbx.SigningKeyFromFile(b)
		if err == nil && k.PublicKey() == pub {
			return k, nil
		}
	}
	return mbx.SigningKey{}, fmt.Errorf("%w: %s does not hold the old host key %s", ErrCorrupt, RetiredHost, mbx.Fingerprint(pub))
}

// loadRotation reads the stored rotation (nil when there never was one).
func (h *Host) loadRotation() (*rotationState, error) {
	var st *rotationState
	err := h.db.View(func(tx *bbolt.Tx) error {
		var err error
		st, err = loadRotationTx(tx)
		return err
	})
	return st, err
}

// updateRotation changes the stored rotation in one transaction.
func (h *Host) updateRotation(fn func(tx *bbolt.Tx, st *rotationState) error) error {
	return h.db.Update(func(tx *bbolt.Tx) error {
		st, err := loadRotationTx(tx)
		if err != nil {
			return err
		}
		if st == nil {
			return fmt.Errorf("%w: no rotation stored", ErrCorrupt)
		}
		if err := fn(tx, st); err != nil {
			return err
		}
		return saveRotationTx(tx, st)
	})
}

// peerNames are the names of st's peers, sorted.
func (st *rotationState) peerNames() []string {
	var out []string
	for n := range st.Peers {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}
