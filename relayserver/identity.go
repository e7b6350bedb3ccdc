package relayserver

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/agentmbx/agentmbx/mbx"
)

// Where the relay key comes from.
const (
	// EnvRelayKey holds the base64 seed of the relay key (what `agentmbx relay keygen` prints), a
	// deploy secret. It wins over the key file.
	EnvRelayKey = "MBX_RELAY_KEY"
	// KeyFile is the relay key's file beside the store, in the key-file JSON of host.key.
	KeyFile = "relay.key"
)

// KeySource says where LoadKey found the key.
type KeySource int

// Key sources.
const (
	KeyFromEnv KeySource = iota + 1
	KeyFromFile
	KeyGenerated
)

// String names the source for logs.
func (s KeySource) String() string {
	switch s {
	case KeyFromEnv:
		return EnvRelayKey
	case KeyFromFile:
		return KeyFile
	case KeyGenerated:
		return "generated"
	default:
		return "unknown"
	}
}

// LoadKey returns the relay's Ed25519 key: from the environment variable MBX_RELAY_KEY when
// getenv has it, else from relay.key in dir, else a new key from r written to relay.key (0600).
// A relay.key that group or others may read is refused (ErrKeyFileMode), naming the fix.
// Errors never contain key material.
func LoadKey(dir string, getenv func(string) string, r io.Reader) (mbx.SigningKey, KeySource, error) {
	if seed := getenv(EnvRelayKey); seed != "" {
		k, err := mbx.SigningKeyFromSeed(seed)
		if err != nil {
			return mbx.SigningKey{}, 0, fmt.Errorf("relayserver: %s is not a base64 32-byte seed: %w", EnvRelayKey, ErrBadKey)
		}
		return k, KeyFromEnv, nil
	}
	path := filepath.Join(dir, KeyFile)
	data, err := readPrivate(path)
	if err == nil {
		k, err := mbx.SigningKeyFromFile(data)
		if err != nil {
			return mbx.SigningKey{}, 0, fmt.Errorf("relayserver: %s is not a valid key file: %w", path, ErrBadKey)
		}
		return k, KeyFromFile, nil
	}
	if errors.Is(err, ErrKeyFileMode) {
		return mbx.SigningKey{}, 0, err
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return mbx.SigningKey{}, 0, fmt.Errorf("relayserver: read %s: %w", path, err)
	}
	k, err := mbx.GenerateSigningKey(r)
	if err != nil {
		return mbx.SigningKey{}, 0, fmt.Errorf("relayserver: generate relay key: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return mbx.SigningKey{}, 0, fmt.Errorf("relayserver: %w", err)
	}
	js, err := json.Marshal(k.File()) //nolint:gosec // G117: the key file is where the key lives (0600)
	if err != nil {
		return mbx.SigningKey{}, 0, fmt.Errorf("relayserver: encode relay key: %w", err)
	}
	// O_EXCL: two starts racing never both write a key; the loser reads the winner's.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return LoadKey(dir, func(string) string { return "" }, r)
	}
	if err != nil {
		return mbx.SigningKey{}, 0, fmt.Errorf("relayserver: create %s: %w", path, err)
	}
	_, werr := f.Write(append(js, '\n'))
	serr := f.Sync()
	cerr := f.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		_ = os.Remove(path)
		return mbx.SigningKey{}, 0, fmt.Errorf("relayserver: write %s: %w", path, err)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync() // make the new directory entry durable too
		_ = d.Close()
	}
	return k, KeyGenerated, nil
}

// readPrivate reads the key file at path, refusing it when group or others may read or write
// it: a key others could read may already be someone else's.
func readPrivate(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("relayserver: %s has mode %#o, readable beyond its owner; run `chmod 600 %s`: %w",
			path, perm, path, ErrKeyFileMode)
	}
	return io.ReadAll(f)
}
