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
	"time"

	"go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/internal/fsutil"
	"github.com/agentmbx/agentmbx/mbx"
)

// File names in the host home.
const (
	HostKeyFile = "host.key"    // Ed25519 host key, mbx.KeyFile JSON, 0600
	EncKeyFile  = "enc.key"     // X25519 enc key, mbx.KeyFile JSON, 0600
	StateFile   = "state.db"    // the bbolt store, 0600
	RetiredEnc  = "enc.retired" // optional: JSON array of mbx.KeyFile, retired enc keys still tried when opening
)

// DefaultPort is the LAN port of a host daemon when --listen names none.
const DefaultPort = 7373

// DefaultListen is the LAN listen address when neither the daemon nor init named one.
const DefaultListen = ":7373"

// EnvHome names the environment variable that selects the host home.
const EnvHome = "MBX_HOME"

// ResolveHome returns the host home: flag when set, else $MBX_HOME, else
// ~/.local/share/agentmbx. The path is made absolute; nothing is created.
func ResolveHome(flag string) (string, error) {
	dir := flag
	if dir == "" {
		dir = os.Getenv(EnvHome)
	}
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("host: resolve home: %w (set --home or %s)", err, EnvHome)
		}
		dir = filepath.Join(home, ".local", "share", "agentmbx")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("host: resolve home %q: %w", dir, err)
	}
	return abs, nil
}

// InitOptions are the settings of a new host.
type InitOptions struct {
	Host   string    // host name (required)
	Listen string    // LAN listen address for the daemon (optional, default :7373)
	Rand   io.Reader // key randomness (default crypto/rand)
	Clock  func() time.Time
}

// Init creates a host home in dir: the directory (0700), the store with the host's name and
// listen address, then enc.key and host.key (0600, mbx.KeyFile JSON). host.key is written last,
// so an interrupted Init can simply be run again. It refuses a home that already has an identity
// (api.ErrHostExists) and changes nothing then.
func Init(dir string, opts InitOptions) error {
	if !mbx.ValidHostName(opts.Host) {
		return fmt.Errorf("host: init: %w: host name %q (letters, digits, . _ -; at most 63)", api.ErrInvalid, opts.Host)
	}
	if opts.Listen != "" {
		if _, _, err := splitListen(opts.Listen); err != nil {
			return fmt.Errorf("host: init: %w", err)
		}
	}
	r := opts.Rand
	if r == nil {
		r = rand.Reader
	}
	clock := opts.Clock
	if clock == nil {
		clock = time.Now
	}
	if _, err := os.Stat(filepath.Join(dir, HostKeyFile)); err == nil {
		return fmt.Errorf("host: init %s: %w", dir, api.ErrHostExists)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("host: init: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("host: init: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil { //nolint:gosec // G302: a directory, owner-only with its x bit
		return fmt.Errorf("host: init: %w", err)
	}
	hk, err := mbx.GenerateSigningKey(r)
	if err != nil {
		return fmt.Errorf("host: init: %w", err)
	}
	ek, err := mbx.GenerateEncKey(r)
	if err != nil {
		return fmt.Errorf("host: init: %w", err)
	}
	// The store's lock is held until the keys are written, and the identity is looked for again
	// under it: of two inits racing on one home, the second finds the first's host.key instead of
	// replacing it.
	db, err := openStateDB(dir, time.Second, false)
	if err != nil {
		if errors.Is(err, bolterrors.ErrTimeout) {
			return fmt.Errorf("host: init: %w", api.ErrLocked)
		}
		return fmt.Errorf("host: init: open store: %w", err)
	}
	defer db.Close()
	if _, err := os.Stat(filepath.Join(dir, HostKeyFile)); err == nil {
		return fmt.Errorf("host: init %s: %w", dir, api.ErrHostExists)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("host: init: %w", err)
	}
	err = db.Update(func(tx *bbolt.Tx) error {
		if err := createBuckets(tx); err != nil {
			return err
		}
		m := tx.Bucket(bucketMeta)
		if err := m.Put(metaHost, []byte(opts.Host)); err != nil {
			return err
		}
		if err := m.Put(metaListen, []byte(opts.Listen)); err != nil {
			return err
		}
		return m.Put(metaCreated, []byte(mbx.ISOTime(clock())))
	})
	if err != nil {
		return fmt.Errorf("host: init: store: %w", err)
	}
	if err := writeKeyFile(filepath.Join(dir, EncKeyFile), ek.File()); err != nil {
		return fmt.Errorf("host: init: %w", err)
	}
	if err := writeKeyFile(filepath.Join(dir, HostKeyFile), hk.File()); err != nil {
		return fmt.Errorf("host: init: %w", err)
	}
	if err := db.Close(); err != nil {
		return fmt.Errorf("host: init: store: %w", err)
	}
	return nil
}

// writeKeyFile replaces the key file at path with f, readable by its owner only.
func writeKeyFile(path string, f mbx.KeyFile) error { return fsutil.WriteJSONFile(path, f, 0o600) }

func readKeys(dir string) (mbx.SigningKey, mbx.EncKey, []mbx.EncKey, error) {
	hb, err := os.ReadFile(filepath.Join(dir, HostKeyFile))
	if errors.Is(err, fs.ErrNotExist) {
		return mbx.SigningKey{}, mbx.EncKey{}, nil, api.ErrNotInitialized
	} else if err != nil {
		return mbx.SigningKey{}, mbx.EncKey{}, nil, err
	}
	hk, err := mbx.SigningKeyFromFile(hb)
	if err != nil {
		return mbx.SigningKey{}, mbx.EncKey{}, nil, fmt.Errorf("%s: %w", HostKeyFile, err)
	}
	eb, err := os.ReadFile(filepath.Join(dir, EncKeyFile))
	if errors.Is(err, fs.ErrNotExist) {
		return mbx.SigningKey{}, mbx.EncKey{}, nil, api.ErrNotInitialized
	} else if err != nil {
		return mbx.SigningKey{}, mbx.EncKey{}, nil, err
	}
	ek, err := mbx.EncKeyFromFile(eb)
	if err != nil {
		return mbx.SigningKey{}, mbx.EncKey{}, nil, fmt.Errorf("%s: %w", EncKeyFile, err)
	}
	var retired []mbx.EncKey
	rb, err := os.ReadFile(filepath.Join(dir, RetiredEnc))
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return mbx.SigningKey{}, mbx.EncKey{}, nil, err
	default:
		var files []mbx.KeyFile
		if err := json.Unmarshal(rb, &files); err != nil {
			return mbx.SigningKey{}, mbx.EncKey{}, nil, fmt.Errorf("%s: %w: not a JSON array of key files", RetiredEnc, api.ErrCorrupt)
		}
		for i, f := range files {
			k, err := mbx.EncKeyFromPrivate(f.PrivateKey)
			if err != nil {
				return mbx.SigningKey{}, mbx.EncKey{}, nil, fmt.Errorf("%s: key %d: %w", RetiredEnc, i, err)
			}
			retired = append(retired, k)
		}
	}
	return hk, ek, retired, nil
}
