package sqlitestore

import (
	"database/sql"
	"os"
	"path/filepath"
	"testing"
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
