package sqlitestore

import (
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/agentmbx/agentmbx/relayserver"
)

func openRaw(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	return db
}

// oldRow is one statement writeOldStore runs, with its arguments.
type oldRow struct {
	sql  string
	args []any
}

// writeOldStore leaves in dir a store of schema version as the binaries of that version left it:
// the DDL of migrations 0→version (unchanged since), then rows, written as those binaries did.
func writeOldStore(t *testing.T, dir string, version int, rows []oldRow) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	raw := openRaw(t, filepath.Join(dir, DBFile))
	defer raw.Close()
	conn, err := raw.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := applyMigrations(ctx, conn, 0, version); err != nil {
		t.Fatal(err)
	}
	for _, q := range rows {
		if _, err := conn.ExecContext(ctx, q.sql, q.args...); err != nil {
			t.Fatalf("%s: %v", q.sql, err)
		}
	}
}

// checkGoesOn checks an upgraded store that writeOldStore left with items i1 (seq 1000, from snd,
// 5 bytes) and i2 (1001, from snd2, 3 bytes, hash "not-hex") queued for tgt and "acked" (999) acked:
// the tombstone of the acked item still makes a retry a duplicate, with its seq and hash; admission
// sees the migrated duplicate and counters; re-inserting a migrated item is a duplicate; a new item
// takes the next seq and counts on top of the migrated counters. It returns that usage.
func checkGoesOn(t *testing.T, s *Store, tgt, snd, snd2, hexHash string) relayserver.Usage {
	t.Helper()
	err := s.Update(ctx, func(tx relayserver.Tx) error {
		if d, err := tx.Dedup(snd, "acked", tgt); err != nil || d.Seq != 999 || d.WireHash != hexHash {
			t.Errorf("dedup tombstone after upgrade = %+v, %v", d, err)
		}
		if a, err := tx.Admission(snd2, "i2", tgt); err != nil || !a.Duplicate || a.Dedup.WireHash != "not-hex" ||
			a.Dedup.Seq != 1001 || a.Usage.Target != (relayserver.Counts{Items: 2, Bytes: 8}) ||
			a.Usage.Sender != (relayserver.Counts{Items: 1, Bytes: 3}) {
			t.Errorf("admission after upgrade = %+v, %v", a, err)
		}
		if _, err := tx.InsertItem(item(tgt, snd, "i1", "abcde", 5000)); !errors.Is(err, relayserver.ErrDuplicate) {
			t.Errorf("re-inserting a migrated item = %v, want ErrDuplicate", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if seq := insert(t, s, item(tgt, snd, "new", "xy", 5)); seq != 1002 {
		t.Errorf("first seq after upgrade = %d, want 1002", seq)
	}
	want := relayserver.Usage{Target: relayserver.Counts{Items: 3, Bytes: 10}, Sender: relayserver.Counts{Items: 2, Bytes: 7}}
	if u := usageOf(t, s, tgt, snd); u != want {
		t.Errorf("usage after upgrade and insert = %+v, want %+v", u, want)
	}
	return want
}
