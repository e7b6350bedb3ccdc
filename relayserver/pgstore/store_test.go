package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/relayserver"
	"github.com/agentmbx/agentmbx/relayserver/internal/storekit/storekittest"
	"github.com/agentmbx/agentmbx/relayserver/pgstore/pgtest"
	"github.com/agentmbx/agentmbx/relayserver/storetest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

var ctx = context.Background()

// openT opens a store on a new, empty database.
func openT(t testing.TB, opts *Options) (*Store, string) {
	t.Helper()
	url := pgtest.Start(t).NewDatabase(t)
	s, err := Open(ctx, url, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s, url
}

// TestStoreContract runs the backend-neutral Store suite against PostgreSQL.
func TestStoreContract(t *testing.T) {
	pgtest.Start(t)
	storetest.Run(t, func(t *testing.T) relayserver.Store { s, _ := openT(t, nil); return s })
}

func TestReopenKeepsEpochAndRefusesNewerSchema(t *testing.T) {
	s, url := openT(t, nil)
	m, err := s.Meta(ctx)
	if err != nil || m.SchemaVersion != SchemaVersion || len(m.Epoch) != 36 {
		t.Fatalf("meta = %+v, %v", m, err)
	}
	// Replicas opening together migrate once and share the epoch.
	var wg sync.WaitGroup
	epochs := make([]string, 4)
	for i := range epochs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s2, err := Open(ctx, url, nil)
			if err != nil {
				t.Errorf("Open %d: %v", i, err)
				return
			}
			defer s2.Close()
			m2, _ := s2.Meta(ctx)
			epochs[i] = m2.Epoch
		}()
	}
	wg.Wait()
	for i, e := range epochs {
		if e != m.Epoch {
			t.Fatalf("replica %d sees epoch %q, want %q", i, e, m.Epoch)
		}
	}
	if _, err := s.pool.Exec(ctx, "UPDATE meta SET value = '99' WHERE key = 'schema_version'"); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(ctx, url, nil); !errors.Is(err, relayserver.ErrSchemaTooNew) {
		t.Fatalf("Open of schema 99 = %v, want ErrSchemaTooNew", err)
	}
	if v, _ := getMeta(ctx, s.pool, "schema_version"); v != "99" {
		t.Fatalf("schema_version after the refusal = %q, want 99 untouched", v)
	}
}

func TestOpenRefusesUnsafeSettingsAndHidesPassword(t *testing.T) {
	url := pgtest.Start(t).NewDatabase(t)
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	_, err := Open(ctx, url+sep+"synchronous_commit=off", nil)
	if !errors.Is(err, ErrUnsafeSettings) {
		t.Fatalf("Open with synchronous_commit=off = %v, want ErrUnsafeSettings", err)
	}
	_, err = Open(ctx, "postgres://relay:s3cret-pw@127.0.0.1:1/x?connect_timeout=1", nil)
	if err == nil || strings.Contains(err.Error(), "s3cret-pw") {
		t.Fatalf("Open of an unreachable server = %v, want an error without the password", err)
	}
	if r := relayserver.DBLabel("postgres://relay:s3cret-pw@db/x?password=other"); strings.Contains(r, "s3cret") || strings.Contains(r, "other") {
		t.Fatalf("Redact = %q, still carries a password", r)
	}
}

// writerOf is s (opened with one writer) with its writer's test hooks.
func writerOf(s *Store) storekittest.Writer {
	return storekittest.Writer{Store: s, Queued: s.w.queue.Len,
		BeforeCommit: func(f func(int) error) { s.w.beforeCommit = f }}
}

func TestGroupCommitCarriesConcurrentUnits(t *testing.T) {
	s, _ := openT(t, &Options{Writers: 1})
	n := storekittest.GroupCommit(t, writerOf(s))
	if st := s.Stats(); st.Commits != 1 || st.Units != int64(n) {
		t.Fatalf("stats = %+v, want 1 commit of %d units", st, n)
	}
}

func TestFailedCommitFailsEveryUnitInIt(t *testing.T) {
	s, _ := openT(t, &Options{Writers: 1})
	storekittest.FailedCommit(t, writerOf(s))
}

// TestResolveLooksUpCommitOutcome: the lookup a writer does when COMMIT lost its connection
// reports committed and rolled-back transactions as they are.
func TestResolveLooksUpCommitOutcome(t *testing.T) {
	s, _ := openT(t, nil)
	for _, commit := range []bool{true, false} {
		ptx, err := s.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var xid int64
		if err := ptx.QueryRow(ctx, "SELECT txid_current()").Scan(&xid); err != nil {
			t.Fatal(err)
		}
		if commit {
			err = ptx.Commit(ctx)
		} else {
			err = ptx.Rollback(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
		got, err := s.w.resolve(xid)
		if err != nil || got != commit {
			t.Fatalf("resolve(committed=%v) = %v, %v", commit, got, err)
		}
	}
}

// TestBusyQueueDefersUnitWithoutHoldingTheGroup: a unit whose queue lock another transaction
// (another replica's group) holds is not waited for inside a group that holds other locks: its
// neighbours commit without it, and it commits in the writer's next group once the lock is free.
func TestBusyQueueDefersUnitWithoutHoldingTheGroup(t *testing.T) {
	s, _ := openT(t, &Options{Writers: 1})
	busy := storetest.Key(5)
	other, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Rollback(ctx)
	if _, err := other.Exec(ctx, lockSQL, queueLock(busy)); err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	w := writerOf(s)
	first := w.Hold(t, release)
	res := make(chan error, 3)
	insert := func(tgt string) {
		res <- s.Update(ctx, func(tx relayserver.Tx) error {
			_, err := tx.InsertItem(storetest.NewItem(tgt, storetest.Key(2), "x", "w", 1))
			return err
		})
	}
	go insert(busy)
	w.WaitQueued(t, 1)
	go insert(storetest.Key(6))
	w.WaitQueued(t, 2)
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if err := <-res; err != nil {
		t.Fatalf("the unit beside the busy one: %v", err)
	}
	select {
	case err := <-res:
		t.Fatalf("the unit on the locked queue returned %v while the lock was held", err)
	case <-time.After(100 * time.Millisecond):
	}
	if err := other.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-res; err != nil {
		t.Fatalf("the deferred unit: %v", err)
	}
	if p, _ := s.Pull(ctx, busy, 0, 10, 1<<20); len(p.Items) != 1 {
		t.Fatalf("the locked queue holds %d items after the lock was freed, want 1", len(p.Items))
	}
	if st := s.Stats(); st.Retries < 1 || st.Units != 3 {
		t.Fatalf("stats = %+v, want the busy unit deferred at least once and 3 units committed", st)
	}
}

func TestQueueStatsAndCommitReports(t *testing.T) {
	s, _ := openT(t, nil)
	var reported atomic.Int64
	s.ReportCommits(func(units int, took time.Duration) { reported.Add(int64(units)) })
	for i := range 3 {
		storetest.Insert(t, s, storetest.NewItem(storetest.Key(1), storetest.Key(2), fmt.Sprint(i), "abcd", 1000+int64(i)))
	}
	storetest.Insert(t, s, storetest.NewItem(storetest.Key(3), storetest.Key(2), "x", "ab", 500))
	qs, err := s.QueueStats(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if qs.Items != 4 || qs.Bytes != 14 || qs.Targets != 2 || !qs.OldestAcceptedAt.Equal(time.UnixMilli(500)) ||
		len(qs.Top) != 1 || qs.Top[0] != (relayserver.TargetDepth{Target: storetest.Key(1), Items: 3, Bytes: 12}) || qs.StoreBytes <= 0 {
		t.Fatalf("QueueStats = %+v", qs)
	}
	if got := reported.Load(); got != 4 {
		t.Fatalf("commit reports carried %d units, want 4", got)
	}
}
