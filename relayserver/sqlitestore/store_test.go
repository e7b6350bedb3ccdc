package sqlitestore

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/relayserver"
	"github.com/agentmbx/agentmbx/relayserver/internal/storekit/storekittest"
	"github.com/agentmbx/agentmbx/relayserver/storetest"
)

var ctx = context.Background()

func openT(t *testing.T, dir string) *Store {
	t.Helper()
	s, err := Open(ctx, dir, &Options{LockWait: 200 * time.Millisecond})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

var t0Bench = storetest.T0

func key(n int) string { return storetest.Key(n) }

func item(target, sender, id string, wire string, at int64) relayserver.Item {
	return storetest.NewItem(target, sender, id, wire, at)
}

func insert(t *testing.T, s *Store, it relayserver.Item) int64 {
	t.Helper()
	return storetest.Insert(t, s, it)
}

// TestStoreContract runs the backend-neutral Store suite against SQLite.
func TestStoreContract(t *testing.T) {
	storetest.Run(t, func(t *testing.T) relayserver.Store { return openT(t, t.TempDir()) })
}

func TestCreateAndReopenKeepsEpoch(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir)
	m, err := s.Meta(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if m.SchemaVersion != SchemaVersion || len(m.Epoch) != 36 || m.RelayPubkey != "" {
		t.Fatalf("new store meta = %+v, want schema %d, a uuid epoch, no relay key", m, SchemaVersion)
	}
	var mode string
	if err := s.db.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil || mode != "wal" {
		t.Fatalf("journal_mode = %q (%v), want wal", mode, err)
	}
	var sync int
	if err := s.db.QueryRowContext(ctx, "PRAGMA synchronous").Scan(&sync); err != nil || sync != 2 {
		t.Fatalf("synchronous = %d (%v), want 2 (FULL)", sync, err)
	}
	s.Close()
	s2 := openT(t, dir)
	m2, _ := s2.Meta(ctx)
	if m2.Epoch != m.Epoch {
		t.Fatalf("epoch after reopen = %s, want %s", m2.Epoch, m.Epoch)
	}
}

func TestSecondOpenRefusedWhileLocked(t *testing.T) {
	dir := t.TempDir()
	openT(t, dir)
	_, err := Open(ctx, dir, &Options{LockWait: 150 * time.Millisecond})
	if !errors.Is(err, relayserver.ErrLocked) {
		t.Fatalf("second Open = %v, want ErrLocked", err)
	}
}

func TestUpgradeFromVersion1KeepsEpochAndData(t *testing.T) {
	dir := t.TempDir()
	// Build a version-1 store by hand, as an older binary would have left it.
	s := openT(t, dir)
	s.Close()
	raw := openRaw(t, filepath.Join(dir, DBFile))
	for _, q := range []string{
		"DROP TABLE meta", "DROP TABLE enrolments", "DROP TABLE sender_lists", "DROP TABLE enc_ads",
		"DROP TABLE items", "DROP TABLE dedup", "DROP TABLE seqs", "DROP TABLE acked",
		"DROP TABLE sender_list_members", "DROP TABLE usage", "DROP TABLE keys", "DROP TABLE deny",
		migrations[0],
		"INSERT INTO meta VALUES('schema_version', '1'), ('epoch', 'old-epoch'), ('relay_pubkey', 'R')",
		`INSERT INTO items VALUES('T', 7, 'envelope', 'i1', 'S', 'h', 3, 1, 2, x'616263'),
			('T', 9, 'envelope', 'i2', 'S2', 'h', 5, 1, 2, x'6162636465')`,
		`INSERT INTO seqs VALUES('T', 10)`,
		`INSERT INTO sender_lists VALUES('T', '["S","S2"]', 1, x'7b7d', 'sig')`,
		`INSERT INTO enrolments(host_pubkey, host_name, owner_fp, account, authorized_by, enrolled_at)
			VALUES('T', 'box', '', NULL, 'host-key', 1)`,
	} {
		if _, err := raw.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	raw.Close()

	s2 := openT(t, dir)
	m, _ := s2.Meta(ctx)
	if m.SchemaVersion != SchemaVersion || m.Epoch != "old-epoch" || m.RelayPubkey != "R" {
		t.Fatalf("after upgrade meta = %+v, want schema %d, epoch old-epoch, key R", m, SchemaVersion)
	}
	err := s2.Update(ctx, func(tx relayserver.Tx) error {
		u, err := tx.Usage("T", "S2")
		if err != nil {
			return err
		}
		if want := (relayserver.Usage{Target: relayserver.Counts{Items: 2, Bytes: 8},
			Sender: relayserver.Counts{Items: 1, Bytes: 5}}); u != want {
			t.Errorf("usage after upgrade = %+v, want %+v", u, want)
		}
		for _, sender := range []string{"S", "S2"} {
			if ok, err := tx.SenderAllowed("T", sender); err != nil || !ok {
				t.Errorf("SenderAllowed(T, %s) = %v, %v after upgrade, want true", sender, ok, err)
			}
		}
		if ok, _ := tx.SenderAllowed("T", "X"); ok {
			t.Errorf("SenderAllowed(T, X) = true after upgrade, want false")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	p, err := s2.Pull(ctx, "T", 0, 10, 1<<20)
	if err != nil || len(p.Items) != 2 || p.HeadSeq != 9 || string(p.Items[1].Wire) != "abcde" {
		t.Fatalf("pull after upgrade = %+v, %v; want 2 items, head 9", p, err)
	}
}

func TestNewerSchemaRefused(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir)
	s.Close()
	raw := openRaw(t, filepath.Join(dir, DBFile))
	if _, err := raw.ExecContext(ctx, "UPDATE meta SET value = '99' WHERE key = 'schema_version'"); err != nil {
		t.Fatal(err)
	}
	raw.Close()
	_, err := Open(ctx, dir, nil)
	if !errors.Is(err, relayserver.ErrSchemaTooNew) {
		t.Fatalf("Open of schema 99 = %v, want ErrSchemaTooNew", err)
	}
	// The refusal changed nothing.
	raw = openRaw(t, filepath.Join(dir, DBFile))
	defer raw.Close()
	var v string
	if err := raw.QueryRowContext(ctx, "SELECT value FROM meta WHERE key = 'schema_version'").Scan(&v); err != nil || v != "99" {
		t.Fatalf("schema_version after refusal = %q, %v; want 99", v, err)
	}
}

// TestSeqFloorSurvivesReopen: the seq counter is stored, so an acked, empty queue never hands
// out a seq again after the store is reopened (the rest of the seq rules are in storetest).
func TestSeqFloorSurvivesReopen(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir)
	tgt, snd := key(1), key(2)
	insert(t, s, item(tgt, snd, "a", "a", 1000))
	if got := insert(t, s, item(tgt, snd, "d", "d", 5000)); got != 5000 {
		t.Fatalf("seq at 5000 = %d, want 5000", got)
	}
	storetest.Ack(t, s, tgt, 5000)
	s.Close()
	s = openT(t, dir)
	if got := insert(t, s, item(tgt, snd, "e", "e", 10)); got != 5001 {
		t.Fatalf("seq after ack and reopen = %d, want 5001", got)
	}
}

// writerOf is s with its writer's test hooks.
func writerOf(s *Store) storekittest.Writer {
	return storekittest.Writer{Store: s, Queued: s.w.queue.Len,
		BeforeCommit: func(f func(int) error) { s.w.beforeCommit = f }}
}

func TestGroupCommitCarriesConcurrentUnits(t *testing.T) {
	storekittest.GroupCommit(t, writerOf(openT(t, t.TempDir())))
}

func TestFailedCommitFailsEveryUnitInIt(t *testing.T) {
	storekittest.FailedCommit(t, writerOf(openT(t, t.TempDir())))
}

// A unit that fails after writing runs without a savepoint of its own: the writer rolls the group
// back and runs the others again, so its writes vanish and theirs commit, still in one commit.
func TestUnitFailingAfterWriteLeavesTheGroupIntact(t *testing.T) {
	s := openT(t, t.TempDir())
	var sizes []int
	s.w.beforeCommit = func(n int) error { sizes = append(sizes, n); return nil }
	release := make(chan struct{})
	w := writerOf(s)
	first := w.Hold(t, release)
	boom := errors.New("boom")
	units := []func(relayserver.Tx) error{
		func(tx relayserver.Tx) error { _, err := tx.InsertItem(item(key(9), key(1), "a", "a", 1)); return err },
		func(tx relayserver.Tx) error {
			if _, err := tx.InsertItem(item(key(9), key(2), "b", "b", 1)); err != nil {
				return err
			}
			return boom // after writing
		},
		func(relayserver.Tx) error { return boom }, // before writing
		func(tx relayserver.Tx) error { _, err := tx.InsertItem(item(key(9), key(3), "d", "d", 1)); return err },
	}
	errs := make([]chan error, len(units))
	for i, fn := range units {
		errs[i] = make(chan error, 1)
		go func() { errs[i] <- s.Update(ctx, fn) }()
		w.WaitQueued(t, i+1) // queued in order
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	for i, want := range []error{nil, boom, boom, nil} {
		if err := <-errs[i]; !errors.Is(err, want) || (want == nil && err != nil) {
			t.Errorf("unit %d = %v, want %v", i, err, want)
		}
	}
	p, err := s.Pull(ctx, key(9), 0, 100, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, it := range p.Items {
		got = append(got, it.ItemID)
	}
	if !slices.Equal(got, []string{"first", "a", "d"}) {
		t.Errorf("queue = %v, want [first a d]", got)
	}
	if len(sizes) != 1 || sizes[0] != 5 {
		t.Errorf("commit group sizes = %v, want one commit of 5 units", sizes)
	}
}

// A group takes no further unit once its units have queued MaxGroupItems items; the unit that
// crosses the cap still runs whole, and the units left over form the next groups.
func TestGroupClosesAtMaxGroupItems(t *testing.T) {
	s, err := Open(ctx, t.TempDir(), &Options{LockWait: 200 * time.Millisecond, MaxGroupItems: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	var sizes []int
	s.w.beforeCommit = func(n int) error { sizes = append(sizes, n); return nil }
	release := make(chan struct{})
	w := writerOf(s)
	first := w.Hold(t, release) // one item
	const units = 6
	errs := make([]chan error, units)
	for i := range units {
		errs[i] = make(chan error, 1)
		go func() {
			errs[i] <- s.Update(ctx, func(tx relayserver.Tx) error {
				for j := range 2 {
					id := fmt.Sprintf("u%d-%d", i, j)
					if _, err := tx.InsertItem(item(key(9), key(1), id, id, 1)); err != nil {
						return err
					}
				}
				return nil
			})
		}()
		w.WaitQueued(t, i+1)
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	for i := range units {
		if err := <-errs[i]; err != nil {
			t.Fatalf("unit %d: %v", i, err)
		}
	}
	// 1+2+2 crosses 4 after the third unit, then 2+2 twice.
	if !slices.Equal(sizes, []int{3, 2, 2}) {
		t.Errorf("commit group sizes = %v, want [3 2 2]", sizes)
	}
	p, err := s.Pull(ctx, key(9), 0, 100, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Items) != 1+2*units {
		t.Errorf("queued %d items, want %d", len(p.Items), 1+2*units)
	}
}
