package rotation

import (
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"go.etcd.io/bbolt"

	"github.com/agentmbx/agentmbx/internal/failpoint"
	"github.com/agentmbx/agentmbx/internal/fsutil"
	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/relaylink"
)

// Files of a rotation in the host home.
const (
	RetiredHost = "host.retired"  // JSON array of mbx.KeyFile: this host's retired host keys
	NextHostKey = "host.key.next" // the new host key between prepare and swap
	NextEncKey  = "enc.key.next"  // the new enc key between prepare and swap
)

// Home is the host home as a rotation sees it: its directory and the names of the key files
// it reads and replaces there (the host owns their names).
type Home struct {
	Dir        string
	HostKey    string // the current host key, mbx.KeyFile JSON
	EncKey     string // the current enc key, mbx.KeyFile JSON
	RetiredEnc string // JSON array of mbx.KeyFile: the retired enc keys
}

func (h Home) path(name string) string { return filepath.Join(h.Dir, name) }

// Options configure Prepare.
type Options struct {
	Rand        io.Reader // key randomness (default crypto/rand)
	Clock       func() time.Time
	LockTimeout time.Duration // how long the caller waits for the store's lock (default 1 s)
}

// PeersFunc lists the names of the paired peers, read in tx.
type PeersFunc func(tx *bbolt.Tx) ([]string, error)

// Prepare starts a rotation of the host named name, whose store db the caller opened and holds
// (no daemon may), and does its local part: new keys, the signed record (with a progress entry
// for each of peers and for the pinned relay), the swap. It refuses while an earlier rotation
// is not done (ErrInProgress). It returns the signed record.
func Prepare(home Home, db *bbolt.DB, name string, peers PeersFunc, opts Options) (mbx.SignedRotation, error) {
	if opts.Rand == nil {
		opts.Rand = rand.Reader
	}
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	old, err := readSigningKey(home.path(home.HostKey))
	if err != nil {
		return mbx.SignedRotation{}, err
	}
	if err := FinishSwap(home, db); err != nil {
		return mbx.SignedRotation{}, err
	}
	if st, err := load(db); err != nil {
		return mbx.SignedRotation{}, err
	} else if st != nil && st.Done == "" {
		return mbx.SignedRotation{}, ErrInProgress
	}
	nk, err := mbx.GenerateSigningKey(opts.Rand)
	if err != nil {
		return mbx.SignedRotation{}, err
	}
	ne, err := mbx.GenerateEncKey(opts.Rand)
	if err != nil {
		return mbx.SignedRotation{}, err
	}
	if err := writeKeyFile(home.path(NextEncKey), ne.File()); err != nil {
		return mbx.SignedRotation{}, err
	}
	if err := writeKeyFile(home.path(NextHostKey), nk.File()); err != nil {
		return mbx.SignedRotation{}, err
	}
	signed, err := mbx.SignRotation(name, old, nk, ne.PublicKey(), opts.Clock())
	if err != nil {
		return mbx.SignedRotation{}, err
	}
	err = db.Update(func(tx *bbolt.Tx) error {
		st := &State{Signed: signed, Step: stepPrepared, Started: mbx.ISOTime(opts.Clock()), Peers: map[string]*PeerProgress{}}
		names, err := peers(tx)
		if err != nil {
			return err
		}
		for _, n := range names {
			st.Peers[n] = &PeerProgress{}
		}
		rs, err := relaylink.LoadTx(tx)
		if err != nil {
			return err
		}
		// A relay pinned as v1 has no rotation endpoint: there are no relay steps, and the new
		// key enrols there afresh under the same name (docs/design.md: Compatibility).
		if rs != nil && !rs.V1 {
			st.Relay = &RelayProgress{URL: rs.URL, RelayKey: rs.RelayKey}
		}
		return saveTx(tx, st)
	})
	if err != nil {
		return mbx.SignedRotation{}, err
	}
	if err := failpoint.Inject(FailPrepared); err != nil {
		return mbx.SignedRotation{}, err
	}
	if err := FinishSwap(home, db); err != nil {
		return mbx.SignedRotation{}, err
	}
	return signed, nil
}

// FinishSwap does the swap of a prepared rotation (nothing when there is none): retire the old
// keys, install the new ones, record the step. Every part is idempotent, so the host's Open
// calls it to finish a swap a crash interrupted.
func FinishSwap(home Home, db *bbolt.DB) error {
	st, err := load(db)
	if err != nil || st == nil {
		return err
	}
	if st.Step != stepPrepared {
		return removeNextKeys(home) // left by a crash right after the swap, or by an unfinished prepare
	}
	if err := swapKeys(home, st.Signed.Rec); err != nil {
		return err
	}
	err = db.Update(func(tx *bbolt.Tx) error {
		st, err := loadTx(tx)
		if err != nil || st == nil {
			return err
		}
		st.Step = stepSwapped
		return saveTx(tx, st)
	})
	if err != nil {
		return err
	}
	if err := failpoint.Inject(FailSwapped); err != nil {
		return err
	}
	return removeNextKeys(home)
}

// swapKeys retires the current keys and installs rec's new ones (enc key first, host key last),
// unless the host key is the new one already.
func swapKeys(home Home, rec mbx.RotationRecord) error {
	cur, err := readSigningKey(home.path(home.HostKey))
	if err != nil {
		return err
	}
	if cur.PublicKey() == rec.NewPub {
		return nil
	}
	curEnc, err := readEncKey(home.path(home.EncKey))
	if err != nil {
		return err
	}
	nk, ne, err := readNextKeys(home, rec)
	if err != nil {
		return err
	}
	if cur.PublicKey() != rec.OldPub {
		return fmt.Errorf("%w: %s is neither the rotation's old nor its new key", ErrCorrupt, home.HostKey)
	}
	if err := retireKey(home.path(RetiredHost), cur.File()); err != nil {
		return err
	}
	if curEnc.PublicKey() != rec.NewEncPub {
		if err := retireKey(home.path(home.RetiredEnc), curEnc.File()); err != nil {
			return err
		}
		if err := writeKeyFile(home.path(home.EncKey), ne.File()); err != nil {
			return err
		}
	}
	if err := failpoint.Inject(FailEncSwapped); err != nil {
		return err
	}
	return writeKeyFile(home.path(home.HostKey), nk.File())
}

// removeNextKeys removes host.key.next and enc.key.next (once swapped, or never recorded).
func removeNextKeys(home Home) error {
	for _, f := range []string{NextHostKey, NextEncKey} {
		if err := os.Remove(home.path(f)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

// readNextKeys reads host.key.next and enc.key.next and checks them against the record.
func readNextKeys(home Home, rec mbx.RotationRecord) (mbx.SigningKey, mbx.EncKey, error) {
	hb, err := os.ReadFile(home.path(NextHostKey))
	if err != nil {
		return mbx.SigningKey{}, mbx.EncKey{}, fmt.Errorf("%w: rotation prepared but %s unreadable: %w", ErrCorrupt, NextHostKey, err)
	}
	nk, err := mbx.SigningKeyFromFile(hb)
	if err != nil || nk.PublicKey() != rec.NewPub {
		return mbx.SigningKey{}, mbx.EncKey{}, fmt.Errorf("%w: %s is not the rotation's new key", ErrCorrupt, NextHostKey)
	}
	eb, err := os.ReadFile(home.path(NextEncKey))
	if err != nil {
		return mbx.SigningKey{}, mbx.EncKey{}, fmt.Errorf("%w: rotation prepared but %s unreadable: %w", ErrCorrupt, NextEncKey, err)
	}
	ne, err := mbx.EncKeyFromFile(eb)
	if err != nil || ne.PublicKey() != rec.NewEncPub {
		return mbx.SigningKey{}, mbx.EncKey{}, fmt.Errorf("%w: %s is not the rotation's new enc key", ErrCorrupt, NextEncKey)
	}
	return nk, ne, nil
}

func readSigningKey(path string) (mbx.SigningKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return mbx.SigningKey{}, err
	}
	k, err := mbx.SigningKeyFromFile(b)
	if err != nil {
		return mbx.SigningKey{}, fmt.Errorf("%s: %w", filepath.Base(path), err)
	}
	return k, nil
}

func readEncKey(path string) (mbx.EncKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return mbx.EncKey{}, err
	}
	k, err := mbx.EncKeyFromFile(b)
	if err != nil {
		return mbx.EncKey{}, fmt.Errorf("%s: %w", filepath.Base(path), err)
	}
	return k, nil
}

// writeKeyFile replaces the key file at path with f, readable by its owner only.
func writeKeyFile(path string, f mbx.KeyFile) error { return fsutil.WriteJSONFile(path, f, 0o600) }

// retireKey appends f to the JSON array of key files at path (atomically; once).
func retireKey(path string, f mbx.KeyFile) error {
	files, err := ReadKeyList(path)
	if err != nil {
		return err
	}
	for _, o := range files {
		if o.PrivateKey == f.PrivateKey {
			return nil
		}
	}
	return fsutil.WriteJSONFile(path, append(files, f), 0o600)
}

// ReadKeyList reads a JSON array of key files (none when the file does not exist).
func ReadKeyList(path string) ([]mbx.KeyFile, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	var files []mbx.KeyFile
	if err := json.Unmarshal(b, &files); err != nil {
		return nil, fmt.Errorf("%s: %w: not a JSON array of key files", filepath.Base(path), ErrCorrupt)
	}
	return files, nil
}

// retiredHostKey returns this host's retired host key whose public key is pub.
func retiredHostKey(home Home, pub string) (mbx.SigningKey, error) {
	files, err := ReadKeyList(home.path(RetiredHost))
	if err != nil {
		return mbx.SigningKey{}, err
	}
	for _, f := range files {
		b, err := json.Marshal(f) //nolint:gosec // G117: the key file is where the key lives (0600)
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
