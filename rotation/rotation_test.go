package rotation

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"go.etcd.io/bbolt"

	"github.com/agentmbx/agentmbx/internal/failpoint"
	"github.com/agentmbx/agentmbx/internal/testkit"
	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/outbox"
)

// These tests run the package on a bare home and store, with a fake Host; the host package's
// tests run it end to end (LAN, relay, SIGKILL drills at each failpoint).

var start = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

// testHome is a home with a host key and an enc key, and its store.
type testHome struct {
	home  Home
	db    *bbolt.DB
	key   mbx.SigningKey
	enc   mbx.EncKey
	clock *testkit.Clock
	peers []string
}

func newTestHome(t *testing.T, peers ...string) *testHome {
	t.Helper()
	dir := t.TempDir()
	th := &testHome{home: Home{Dir: dir, HostKey: "host.key", EncKey: "enc.key", RetiredEnc: "enc.retired"},
		clock: testkit.NewClock(start), peers: peers}
	th.key, _ = mbx.GenerateSigningKey(testkit.Rand(1))
	th.enc, _ = mbx.GenerateEncKey(testkit.Rand(2))
	if err := writeKeyFile(th.home.path("host.key"), th.key.File()); err != nil {
		t.Fatal(err)
	}
	if err := writeKeyFile(th.home.path("enc.key"), th.enc.File()); err != nil {
		t.Fatal(err)
	}
	db, err := bbolt.Open(filepath.Join(dir, "state.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	th.db = db
	return th
}

func (th *testHome) prepare(seed uint64) (mbx.SignedRotation, error) {
	return Prepare(th.home, th.db, "alpha", func(*bbolt.Tx) ([]string, error) { return th.peers, nil },
		Options{Rand: testkit.Rand(seed), Clock: th.clock.Now})
}

// checkSwapped: the home's keys are s's new ones, the old ones are retired, the next files gone.
func (th *testHome) checkSwapped(t *testing.T, s mbx.SignedRotation) {
	t.Helper()
	k, err := readSigningKey(th.home.path("host.key"))
	if err != nil || k.PublicKey() != s.Rec.NewPub {
		t.Fatalf("host.key = %s, %v; want the new key", k.Fingerprint(), err)
	}
	e, err := readEncKey(th.home.path("enc.key"))
	if err != nil || e.PublicKey() != s.Rec.NewEncPub {
		t.Fatalf("enc.key = %v; want the new enc key", err)
	}
	for file, pub := range map[string]string{RetiredHost: s.Rec.OldPub, "enc.retired": th.enc.PublicKey()} {
		files, err := ReadKeyList(th.home.path(file))
		if err != nil || len(files) != 1 || files[0].PublicKey != pub {
			t.Fatalf("%s = %+v, %v; want the old key once", file, files, err)
		}
	}
	for _, f := range []string{NextHostKey, NextEncKey} {
		if _, err := os.Stat(th.home.path(f)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left behind (%v)", f, err)
		}
	}
	st, err := load(th.db)
	if err != nil || st == nil || st.Step != stepSwapped {
		t.Fatalf("stored rotation %+v, %v; want step swapped", st, err)
	}
}

func TestPrepareSwapsKeysAndRecordsEachPeer(t *testing.T) {
	th := newTestHome(t, "beta", "gamma")
	s, err := th.prepare(10)
	if err != nil {
		t.Fatal(err)
	}
	if s.Rec.Host != "alpha" || s.Rec.OldPub != th.key.PublicKey() {
		t.Fatalf("record %+v, want alpha's rotation from its key", s.Rec)
	}
	if _, err := mbx.CheckRotation(mustJSON(t, s), th.key.PublicKey()); err != nil {
		t.Fatalf("the record does not verify against the old key: %v", err)
	}
	th.checkSwapped(t, s)
	st, _ := load(th.db)
	if st.Relay != nil || len(st.Peers) != 2 || st.Peers["beta"] == nil || st.Peers["gamma"] == nil || st.Done != "" {
		t.Fatalf("stored %+v, want a progress entry per peer and no relay", st)
	}
	if _, err := th.prepare(11); !errors.Is(err, ErrInProgress) {
		t.Fatalf("second Prepare = %v, want ErrInProgress", err)
	}
	th.checkSwapped(t, s) // the refusal changed nothing
}

// TestFinishSwapResumes: a prepare stopped at each failpoint of the swap is finished by
// FinishSwap, which is then a no-op.
func TestFinishSwapResumes(t *testing.T) {
	for _, point := range []string{FailPrepared, FailEncSwapped, FailSwapped} {
		t.Run(point, func(t *testing.T) {
			th := newTestHome(t, "beta")
			restore := failpoint.Enable(point, failpoint.Error)
			_, err := th.prepare(20)
			restore()
			if !errors.Is(err, failpoint.ErrInjected) {
				t.Fatalf("Prepare = %v, want the injected stop", err)
			}
			st, _ := load(th.db)
			if err := FinishSwap(th.home, th.db); err != nil {
				t.Fatal(err)
			}
			th.checkSwapped(t, st.Signed)
			if err := FinishSwap(th.home, th.db); err != nil {
				t.Fatal(err)
			}
			th.checkSwapped(t, st.Signed)
		})
	}
}

// TestFinishSwapRefusesAForeignKey: a host.key that is neither the rotation's old nor its new
// key is reported corrupt and nothing is replaced.
func TestFinishSwapRefusesAForeignKey(t *testing.T) {
	th := newTestHome(t)
	restore := failpoint.Enable(FailPrepared, failpoint.Error)
	_, err := th.prepare(30)
	restore()
	if !errors.Is(err, failpoint.ErrInjected) {
		t.Fatal(err)
	}
	other, _ := mbx.GenerateSigningKey(testkit.Rand(31))
	if err := writeKeyFile(th.home.path("host.key"), other.File()); err != nil {
		t.Fatal(err)
	}
	if err := FinishSwap(th.home, th.db); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("FinishSwap = %v, want ErrCorrupt", err)
	}
	if k, _ := readSigningKey(th.home.path("host.key")); k.PublicKey() != other.PublicKey() {
		t.Error("host.key was replaced")
	}
	if files, _ := ReadKeyList(th.home.path(RetiredHost)); len(files) != 0 {
		t.Errorf("%s = %+v, want nothing retired", RetiredHost, files)
	}
}

// fakeHost is a peers store of one peer, beta.
type fakeHost struct {
	peers    []Peer
	repinned []Peer
}

func (f *fakeHost) Peers(*bbolt.Tx) ([]Peer, error) { return slices.Clone(f.peers), nil }
func (f *fakeHost) Repin(_ *bbolt.Tx, p Peer) (int, error) {
	f.repinned = append(f.repinned, p)
	f.peers[0] = p
	return 0, nil
}
func (f *fakeHost) Repinned(int) {}
func (f *fakeHost) RecordRelayPush(context.Context, string, []outbox.Row, []outbox.Outcome) {
}

// TestApplyRepinsOnlyAVerifiedRecord: Apply hands the host the rotated pin of a record that
// verifies against the pinned key, and nothing for one that does not or for a replay.
func TestApplyRepinsOnlyAVerifiedRecord(t *testing.T) {
	th := newTestHome(t)
	betaOld, _ := mbx.GenerateSigningKey(testkit.Rand(40))
	betaNew, _ := mbx.GenerateSigningKey(testkit.Rand(41))
	betaEnc, _ := mbx.GenerateEncKey(testkit.Rand(42))
	stranger, _ := mbx.GenerateSigningKey(testkit.Rand(43))
	fh := &fakeHost{peers: []Peer{{Host: "beta", HostPubkey: betaOld.PublicKey(), EncPub: betaEnc.PublicKey()}}}
	r, err := Open(Config{Home: th.home, DB: th.db, Name: "alpha", Key: th.key, Enc: []mbx.EncKey{th.enc},
		Clock: th.clock.Now, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Host: fh})
	if err != nil {
		t.Fatal(err)
	}
	sign := func(from, to mbx.SigningKey) []byte {
		s, err := mbx.SignRotation("beta", from, to, betaEnc.PublicKey(), th.clock.Now())
		if err != nil {
			t.Fatal(err)
		}
		return mustJSON(t, s)
	}
	ctx := context.Background()
	if _, err := r.Apply(ctx, sign(stranger, betaNew)); !errors.Is(err, ErrRefused) || len(fh.repinned) != 0 {
		t.Fatalf("a record from a key never pinned = %v, repinned %v; want refused, nothing", err, fh.repinned)
	}
	valid := sign(betaOld, betaNew)
	res, err := r.Apply(ctx, valid)
	if err != nil || !res.Applied || len(fh.repinned) != 1 {
		t.Fatalf("valid record = %+v, %v", res, err)
	}
	if p := fh.repinned[0]; p.HostPubkey != betaNew.PublicKey() || !slices.Equal(p.RetiredKeys, []string{betaOld.PublicKey()}) || p.RotatedAt == "" {
		t.Fatalf("repinned %+v, want the new key with the old one retired", p)
	}
	if res, err := r.Apply(ctx, valid); err != nil || res.Applied || len(fh.repinned) != 1 {
		t.Fatalf("replay = %+v, %v; want a no-op", res, err)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
