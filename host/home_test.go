package host

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/internal/testkit"
	"github.com/agentmbx/agentmbx/mbx"
)

func TestResolveHome(t *testing.T) {
	t.Setenv(EnvHome, "/tmp/from-env")
	if got, _ := ResolveHome("/tmp/from-flag"); got != "/tmp/from-flag" {
		t.Errorf("flag: got %q", got)
	}
	if got, _ := ResolveHome(""); got != "/tmp/from-env" {
		t.Errorf("env: got %q", got)
	}
	t.Setenv(EnvHome, "")
	t.Setenv("HOME", "/tmp/home")
	if got, _ := ResolveHome(""); got != "/tmp/home/.local/share/agentmbx" {
		t.Errorf("default: got %q", got)
	}
	if got, _ := ResolveHome("rel"); !filepath.IsAbs(got) {
		t.Errorf("relative flag not made absolute: %q", got)
	}
}

func TestInitAndOpen(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "home")
	if err := Init(dir, InitOptions{Host: "bad name"}); !errors.Is(err, api.ErrInvalid) {
		t.Fatalf("Init with a bad name = %v, want api.ErrInvalid", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused Init created the home")
	}
	if _, err := Open(dir, nil); !errors.Is(err, api.ErrNotInitialized) {
		t.Fatalf("Open before Init = %v, want api.ErrNotInitialized", err)
	}
	if err := Init(dir, InitOptions{Host: "alpha", Listen: "127.0.0.1:7373", Rand: testkit.Rand(1)}); err != nil {
		t.Fatal(err)
	}
	for name, mode := range map[string]os.FileMode{".": 0o700, HostKeyFile: 0o600, EncKeyFile: 0o600, StateFile: 0o600} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != mode {
			t.Errorf("%s mode = %o, want %o", name, got, mode)
		}
	}
	keyBefore, _ := os.ReadFile(filepath.Join(dir, HostKeyFile))
	if err := Init(dir, InitOptions{Host: "other"}); !errors.Is(err, api.ErrHostExists) {
		t.Fatalf("second Init = %v, want api.ErrHostExists", err)
	}
	if keyAfter, _ := os.ReadFile(filepath.Join(dir, HostKeyFile)); string(keyAfter) != string(keyBefore) {
		t.Fatal("second Init changed host.key")
	}
	h, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if h.Name() != "alpha" || h.ListenAddr() != "127.0.0.1:7373" || h.Key().IsZero() || h.EncKey().IsZero() {
		t.Fatalf("opened host: %s %q", h.Name(), h.ListenAddr())
	}
	// The store is locked while open.
	if _, err := Open(dir, &Options{LockTimeout: 50 * time.Millisecond}); !errors.Is(err, api.ErrLocked) {
		t.Fatalf("second Open = %v, want api.ErrLocked", err)
	}
	st, err := h.Status(context.Background())
	if err != nil || st.Host != "alpha" || st.Fingerprint != h.Key().Fingerprint() || st.Daemon {
		t.Fatalf("status = %+v, %v", st, err)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	h2, err := Open(dir, nil)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	if h2.Key().PublicKey() != h.Key().PublicKey() {
		t.Fatal("reopened host has another key")
	}
	h2.Close()
}

func TestPinPeer(t *testing.T) {
	clock := newClock()
	a := newTestHost(t, "alpha", clock)
	ctx := context.Background()
	k1, _ := mbx.GenerateSigningKey(testkit.Rand(11))
	k2, _ := mbx.GenerateSigningKey(testkit.Rand(12))
	e1, _ := mbx.GenerateEncKey(testkit.Rand(13))
	e2, _ := mbx.GenerateEncKey(testkit.Rand(14))
	p := PeerRecord{Host: "beta", HostPubkey: k1.PublicKey(), EncPub: e1.PublicKey(), Addr: "127.0.0.1:7373"}
	if err := a.PinPeer(p); err != nil {
		t.Fatal(err)
	}
	// A new enc key and address: updated, the old enc key kept as retired.
	p2 := p
	p2.EncPub, p2.Addr = e2.PublicKey(), "127.0.0.1:7374"
	if err := a.PinPeer(p2); err != nil {
		t.Fatal(err)
	}
	got, _ := a.peerRecord("beta")
	if got.EncPub != e2.PublicKey() || got.Addr != "127.0.0.1:7374" || !slices.Equal(got.RetiredEncKeys, []string{e1.PublicKey()}) {
		t.Fatalf("after update: %+v", got)
	}
	// Another key under the name: refused unless the old key is retired explicitly.
	p3 := p2
	p3.HostPubkey = k2.PublicKey()
	if err := a.PinPeer(p3); !errors.Is(err, api.ErrPeerKeyMismatch) {
		t.Fatalf("key change = %v, want api.ErrPeerKeyMismatch", err)
	}
	p3.RetiredKeys = []string{k1.PublicKey()}
	if err := a.PinPeer(p3); err != nil {
		t.Fatalf("explicit rotation: %v", err)
	}
	got, _ = a.peerRecord("beta")
	if got.HostPubkey != k2.PublicKey() || !slices.Equal(got.RetiredKeys, []string{k1.PublicKey()}) {
		t.Fatalf("after rotation: %+v", got)
	}
	// Retired keys stay valid for verification.
	if got.KeyFor(k1.Fingerprint()) != k1.PublicKey() {
		t.Error("retired key no longer verifies")
	}
	if byKey, err := a.peerByKey(k1.PublicKey()); err != nil || byKey.Host != "beta" {
		t.Errorf("peerByKey(retired) = %+v, %v", byKey, err)
	}
	// The same key under another name, this host itself, bad records.
	for name, tc := range map[string]struct {
		p    PeerRecord
		want error
	}{
		"key in use": {PeerRecord{Host: "gamma", HostPubkey: k2.PublicKey(), EncPub: e1.PublicKey()}, api.ErrPeerKeyInUse},
		"self name":  {PeerRecord{Host: "alpha", HostPubkey: k1.PublicKey(), EncPub: e1.PublicKey()}, api.ErrSelf},
		"self key":   {PeerRecord{Host: "delta", HostPubkey: a.key.PublicKey(), EncPub: e1.PublicKey()}, api.ErrSelf},
		"bad name":   {PeerRecord{Host: "-x", HostPubkey: k1.PublicKey(), EncPub: e1.PublicKey()}, api.ErrInvalid},
		"bad key":    {PeerRecord{Host: "delta", HostPubkey: "abc", EncPub: e1.PublicKey()}, api.ErrInvalid},
		"bad addr":   {PeerRecord{Host: "delta", HostPubkey: k1.PublicKey(), EncPub: e1.PublicKey(), Addr: "nope"}, api.ErrInvalid},
	} {
		if err := a.PinPeer(tc.p); !errors.Is(err, tc.want) {
			t.Errorf("%s: PinPeer = %v, want %v", name, err, tc.want)
		}
	}
	peers, err := a.Peers(ctx)
	if err != nil || len(peers) != 1 || peers[0].Fingerprint != k2.Fingerprint() {
		t.Fatalf("Peers = %+v, %v", peers, err)
	}
	if err := a.RemovePeer(ctx, "beta"); err != nil {
		t.Fatal(err)
	}
	if err := a.RemovePeer(ctx, "beta"); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("second remove = %v, want api.ErrNotFound", err)
	}
}

func TestAgents(t *testing.T) {
	a := newTestHost(t, "alpha", newClock())
	ctx := context.Background()
	if _, err := a.AddAgent(ctx, api.Agent{Name: "ann", Role: "dev"}); err != nil {
		t.Fatal(err)
	}
	if ag, err := a.AddAgent(ctx, api.Agent{Name: "ann"}); err != nil || ag.Role != "dev" {
		t.Fatalf("re-adding without a role = %+v, %v; want the role kept", ag, err)
	}
	if ag, _ := a.AddAgent(ctx, api.Agent{Name: "ann", Role: "ops"}); ag.Role != "ops" {
		t.Fatalf("role update = %+v", ag)
	}
	for _, bad := range []api.Agent{{Name: "A"}, {Name: "mbx"}, {Name: "owner"}, {Name: "ok-name", Role: "Bad Role"}} {
		if _, err := a.AddAgent(ctx, bad); err == nil {
			t.Errorf("AddAgent(%+v) accepted", bad)
		}
	}
	a.send("alice", []string{"ann@alpha"}, "hi", "x") // alice registered on first use
	ags, _ := a.Agents(ctx)
	if len(ags) != 2 || ags[0].Name != "alice" || ags[1].Name != "ann" {
		t.Fatalf("agents = %+v", ags)
	}
}

func TestWait(t *testing.T) {
	a := newTestHost(t, "alpha", newClock())
	ctx := context.Background()
	got, err := a.mail.Wait(ctx, "ann", 10*time.Millisecond)
	if err != nil || len(got) != 0 {
		t.Fatalf("Wait on an empty mailbox = %v, %v; want empty", got, err)
	}
	done := make(chan []api.Message, 1)
	go func() {
		ms, err := a.mail.Wait(ctx, "ann", time.Minute)
		if err != nil {
			t.Error(err)
		}
		done <- ms
	}()
	res := a.send("alice", []string{"ann@alpha"}, "wake up", "x")
	select {
	case ms := <-done:
		if len(ms) != 1 || ms[0].ID != res.ID || ms[0].State != "notified" {
			t.Fatalf("Wait = %+v", ms)
		}
	case <-time.After(time.Minute):
		t.Fatal("Wait did not return after mail arrived")
	}
	// Unread mail is returned at once; a cancelled context ends the wait.
	if ms, _ := a.mail.Wait(ctx, "ann", time.Minute); len(ms) != 1 {
		t.Fatalf("Wait with unread mail = %d messages", len(ms))
	}
	a.mail.Read(ctx, api.ReadRequest{ID: res.ID, Agent: "ann"})
	cctx, cancel := context.WithCancel(ctx)
	go cancel()
	if _, err := a.mail.Wait(cctx, "ann", time.Minute); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Wait = %v", err)
	}
	if _, err := a.mail.Read(ctx, api.ReadRequest{ID: "01KKNTQ2CN9WJ3MR4Q1P12F02T", Agent: "ann"}); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("Read of an unknown message = %v, want api.ErrNotFound", err)
	}
}

// TestInitRaceKeepsOneIdentity: of several inits racing on one home, exactly one creates the
// identity; the others are refused (it exists, or the store is locked) and replace nothing.
func TestInitRaceKeepsOneIdentity(t *testing.T) {
	for round := range 5 {
		dir := filepath.Join(t.TempDir(), "home")
		const n = 6
		errs := make(chan error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs <- Init(dir, InitOptions{Host: fmt.Sprintf("h%d", i)})
			}()
		}
		wg.Wait()
		close(errs)
		ok := 0
		for err := range errs {
			switch {
			case err == nil:
				ok++
			case errors.Is(err, api.ErrHostExists), errors.Is(err, api.ErrLocked):
			default:
				t.Fatalf("round %d: Init: %v", round, err)
			}
		}
		if ok != 1 {
			t.Fatalf("round %d: %d inits succeeded, want exactly 1", round, ok)
		}
		h, err := Open(dir, nil)
		if err != nil {
			t.Fatalf("round %d: Open: %v", round, err)
		}
		h.Close()
	}
}
