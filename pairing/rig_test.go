package pairing

import (
	"crypto/rand"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/internal/testkit"
	"github.com/agentmbx/agentmbx/mbx"
)

// t0 is the tests' starting time.
var t0 = time.Date(2026, 10, 2, 10, 0, 0, 0, time.UTC)

// node is one host as pairing sees it: its identity, a peer store in memory, its LAN mux, its
// clock and its log.
type node struct {
	*Service
	name string
	key  mbx.SigningKey
	enc  mbx.EncKey
	pins *memPins
	mux  *http.ServeMux
}

func (n *node) Name() string        { return n.name }
func (n *node) Key() mbx.SigningKey { return n.key }
func (n *node) EncKey() mbx.EncKey  { return n.enc }

// Peer is the peer pinned under name, or an error when there is none.
func (n *node) Peer(name string) (api.Peer, error) { return n.pins.peer(name) }

// PeerRecords lists the pinned peers.
func (n *node) PeerRecords() ([]api.Peer, error) { return n.pins.list(), nil }

// PinPeer pins p (a test's setup).
func (n *node) PinPeer(p api.Peer) error { return n.pins.Pin(p) }

// pairTestHost makes a node named name with its own clock and log.
func pairTestHost(t *testing.T, name string, clock *testkit.Clock) (*node, *testkit.SyncBuffer) {
	t.Helper()
	key, err := mbx.GenerateSigningKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	enc, err := mbx.GenerateEncKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	lg := &testkit.SyncBuffer{}
	n := &node{name: name, key: key, enc: enc, mux: http.NewServeMux()}
	n.pins = &memPins{self: n, peers: map[string]api.Peer{}}
	n.Service = New(Config{Identity: n, Pins: n.pins, Mux: n.mux, HTTPClient: &http.Client{Timeout: 30 * time.Second},
		Clock: clock.Now, Rand: rand.Reader, Logger: slog.New(slog.NewTextHandler(lg, nil))})
	return n, lg
}

// memPins is a peer store in memory with the host store's rules: a name keeps its key, a key its
// name, and a host does not pin itself.
type memPins struct {
	self  Identity
	mu    sync.Mutex
	peers map[string]api.Peer
}

func (m *memPins) PinnedKey(name string) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.peers[name].HostPubkey, nil
}

func (m *memPins) PinnedName(key string) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, p := range m.peers {
		if p.HostPubkey == key {
			return p.Host, nil
		}
	}
	return "", nil
}

func (m *memPins) Pin(p api.Peer) error {
	if p.Host == m.self.Name() || p.HostPubkey == m.self.Key().PublicKey() {
		return fmt.Errorf("%w: this host itself", api.ErrPairConflict)
	}
	if k, _ := m.PinnedKey(p.Host); k != "" && k != p.HostPubkey {
		return fmt.Errorf("%w: %s has another key", api.ErrPairConflict, p.Host)
	}
	if n, _ := m.PinnedName(p.HostPubkey); n != "" && n != p.Host {
		return fmt.Errorf("%w: the key is pinned as %s", api.ErrPairConflict, n)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	p.Fingerprint = mbx.Fingerprint(p.HostPubkey)
	m.peers[p.Host] = p
	return nil
}

func (m *memPins) peer(name string) (api.Peer, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p, ok := m.peers[name]
	if !ok {
		return api.Peer{}, fmt.Errorf("%s: %w", name, api.ErrNotFound)
	}
	return p, nil
}

func (m *memPins) list() []api.Peer {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []api.Peer
	for _, p := range m.peers {
		out = append(out, p)
	}
	return out
}
