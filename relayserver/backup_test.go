package relayserver_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/relayserver"
	"github.com/agentmbx/agentmbx/relayserver/sqlitestore"
)

// openBackup opens a backup file as a store of its own and returns every item it holds for target.
func openBackup(t *testing.T, file, target string) (relayserver.Meta, map[string]int64) {
	t.Helper()
	dir := t.TempDir()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, sqlitestore.DBFile), b, 0o600); err != nil {
		t.Fatal(err)
	}
	st, err := sqlitestore.Open(bg, dir, nil)
	if err != nil {
		t.Fatalf("the backup does not open as a store: %v", err)
	}
	defer st.Close()
	m, err := st.Meta(bg)
	if err != nil {
		t.Fatal(err)
	}
	p, err := st.Pull(bg, target, 0, 100000, 1<<40)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, it := range p.Items {
		got[it.ItemID] = it.Seq
	}
	return m, got
}

func TestBackupWhileServingHoldsEveryAcceptedItem(t *testing.T) {
	t.Parallel()
	r, a, b, _ := setup(t, nil)
	ulids := mbx.NewULIDs(seeded(7))
	before := map[string]bool{}
	for range 20 {
		id := ulids.New(t0)
		r.push(a, envItem(id, b))
		before[id] = true
	}

	// Pushes keep arriving while the backup runs.
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	ids := make([]string, 500)
	bodies := make([][]byte, len(ids))
	for i := range ids {
		ids[i] = ulids.New(t0)
		bodies[i] = mustJSON(t, mbx.PushRequest{Items: []mbx.PushItem{envItem(ids[i], b)}})
	}
	base, now := r.ts.URL, r.clock.Now()
	pushed, going := make(chan int, 1), make(chan struct{})
	go func() {
		n := 0
		for _, body := range bodies {
			code, _, err := callURL(ctx, base, &a, now, "POST", "/v2/relay/items", body)
			if err != nil || code != 200 {
				break
			}
			if n++; n == 50 {
				close(going)
			}
		}
		if n < 50 {
			close(going)
		}
		pushed <- n
	}()
	<-going

	file := filepath.Join(t.TempDir(), "relay-backup.db")
	m, err := sqlitestore.Backup(bg, r.dir, file)
	if err != nil {
		t.Fatalf("backup while serving: %v", err)
	}
	cancel()
	n := <-pushed
	if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("backup file: %v %v, want mode 0600", fi, err)
	}
	if m.Epoch != r.srv.Epoch() || m.RelayPubkey != r.key.PublicKey() {
		t.Fatalf("backup meta = %+v, want epoch %s and the relay key", m, r.srv.Epoch())
	}
	bm, got := openBackup(t, file, b.pub())
	if bm.Epoch != m.Epoch {
		t.Fatalf("the backup opens with epoch %s, Backup reported %s", bm.Epoch, m.Epoch)
	}
	for id := range before {
		if _, ok := got[id]; !ok {
			t.Errorf("item %s, accepted before the backup started, is not in the backup", id)
		}
	}
	// Whatever else it holds is a prefix of what was pushed concurrently: a snapshot, no holes.
	extra := len(got) - len(before)
	if n < 50 || extra < 50 {
		t.Fatalf("%d concurrent pushes answered, %d in the backup: want at least the 50 answered before it started", n, extra)
	}
	for i, id := range ids[:n] {
		if _, ok := got[id]; ok != (i < extra) {
			t.Fatalf("concurrent item %d (%s) in backup = %v with %d concurrent items in it: not a snapshot", i, id, ok, extra)
		}
	}
	t.Logf("%d concurrent pushes answered, %d of them in the backup", n, extra)
	// The relay still serves after the backup.
	r.push(a, envItem(ulids.New(t0), b))
}

func TestRestoreRefusedWhileServing(t *testing.T) {
	t.Parallel()
	r, a, b, _ := setup(t, nil)
	r.push(a, envItem("01KKNTQ69NA67N0QBPXKXFN501", b))
	file := filepath.Join(t.TempDir(), "b.db")
	if _, err := sqlitestore.Backup(bg, r.dir, file); err != nil {
		t.Fatal(err)
	}
	_, err := sqlitestore.Restore(bg, r.dir, file, nil)
	if !errors.Is(err, relayserver.ErrLocked) {
		t.Fatalf("restore while the relay serves = %v, want ErrLocked", err)
	}
	if p := r.pull(b, 0); p.Epoch != r.srv.Epoch() || len(p.Items) != 1 {
		t.Fatalf("after the refused restore: %+v", p)
	}
}

func TestRestoreRotatesEpochAndKeepsSeqsAbove(t *testing.T) {
	t.Parallel()
	r, a, b, _ := setup(t, nil)
	r.push(a, envItem("01KKNTQ69NA67N0QBPXKXFN501", b), envItem("01KKNTQ69NA67N0QBPXKXFN502", b))
	file := filepath.Join(t.TempDir(), "nightly.db")
	if _, err := sqlitestore.Backup(bg, r.dir, file); err != nil {
		t.Fatal(err)
	}
	r.push(a, envItem("01KKNTQ69NA67N0QBPXKXFN503", b))
	old := r.srv.Epoch()
	p := r.pull(b, 0)
	if len(p.Items) != 3 {
		t.Fatalf("before the restore beta pulled %+v", p)
	}
	received := p.LastSeq

	r.stop()
	// The clock does not move: only the carried seq floor keeps new seqs above the old ones.
	res, err := sqlitestore.Restore(bg, r.dir, file, &sqlitestore.RestoreOptions{Rand: seeded(9), Now: r.clock.Now})
	if err != nil {
		t.Fatalf("restore: %v", err)
	}
	if res.Previous != old || res.Epoch == old || res.Epoch == "" || res.Warning != "" {
		t.Fatalf("restore result = %+v, old epoch %s", res, old)
	}
	r.start()
	if r.srv.Epoch() != res.Epoch {
		t.Fatalf("the relay serves epoch %s, restore wrote %s", r.srv.Epoch(), res.Epoch)
	}
	code, out := r.call(&b, "GET", fmt.Sprintf("/v2/relay/items?after=%d&epoch=%s", received, old), nil)
	if code != 409 {
		t.Fatalf("pull with the pre-restore epoch = %d %s, want 409", code, out)
	}
	p = r.pull(b, 0)
	if p.Epoch != res.Epoch || len(p.Items) != 2 {
		t.Fatalf("after the restore beta pulls %+v, want the backup's 2 items under the new epoch", p)
	}
	seq := r.push(a, envItem("01KKNTQ69NA67N0QBPXKXFN504", b)).Results[0].Targets[0].Seq
	if seq <= received {
		t.Fatalf("post-restore seq %d is not above every seq handed out before (%d)", seq, received)
	}
	r.stop()
	db, err := sql.Open("sqlite", filepath.Join(r.dir, sqlitestore.DBFile))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var from, at string
	if err := db.QueryRow("SELECT value FROM meta WHERE key = 'restored_from'").Scan(&from); err != nil || from != "nightly.db" {
		t.Fatalf("restored_from = %q, %v", from, err)
	}
	if err := db.QueryRow("SELECT value FROM meta WHERE key = 'restored_at'").Scan(&at); err != nil || at != fmt.Sprint(r.clock.Now().UnixMilli()) {
		t.Fatalf("restored_at = %q, %v", at, err)
	}
	if _, err := os.Stat(res.Kept); err != nil {
		t.Fatalf("the replaced database was not kept: %v", err)
	}
	r.start()
}

func TestRestoreBadInputChangesNothing(t *testing.T) {
	t.Parallel()
	r, a, b, _ := setup(t, nil)
	r.push(a, envItem("01KKNTQ69NA67N0QBPXKXFN501", b))
	good := filepath.Join(t.TempDir(), "good.db")
	if _, err := sqlitestore.Backup(bg, r.dir, good); err != nil {
		t.Fatal(err)
	}
	r.push(a, envItem("01KKNTQ69NA67N0QBPXKXFN502", b))
	tmp := t.TempDir()
	notDB := filepath.Join(tmp, "notes.txt")
	if err := os.WriteFile(notDB, bytes.Repeat([]byte("not a database "), 500), 0o600); err != nil {
		t.Fatal(err)
	}
	withMeta := func(name, key, value string) string {
		b, err := os.ReadFile(good)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(tmp, name)
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		db, err := sql.Open("sqlite", path)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if _, err := db.Exec("UPDATE meta SET value = ? WHERE key = ?", value, key); err != nil {
			t.Fatal(err)
		}
		return path
	}
	newer := withMeta("newer.db", "schema_version", fmt.Sprint(sqlitestore.SchemaVersion+1))
	other := withMeta("other.db", "relay_pubkey", keyFor(t, 99).PublicKey())
	empty := filepath.Join(tmp, "empty.db")
	if db, err := sql.Open("sqlite", empty); err != nil {
		t.Fatal(err)
	} else {
		_, err = db.Exec("CREATE TABLE x(y)")
		db.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	epoch := r.srv.Epoch()
	r.stop()
	dbBefore, err := os.ReadFile(filepath.Join(r.dir, sqlitestore.DBFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, file string
		want       error
	}{
		{"missing", filepath.Join(tmp, "nope.db"), os.ErrNotExist},
		{"not sqlite", notDB, relayserver.ErrBadBackup},
		{"not a relay store", empty, relayserver.ErrBadBackup},
		{"newer schema", newer, relayserver.ErrSchemaTooNew},
		{"another relay", other, relayserver.ErrRelayKeyMismatch},
	} {
		_, err := sqlitestore.Restore(bg, r.dir, c.file, nil)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: restore = %v, want %v", c.name, err, c.want)
		}
		got, err := os.ReadFile(filepath.Join(r.dir, sqlitestore.DBFile))
		if err != nil || !bytes.Equal(got, dbBefore) {
			t.Errorf("%s: relay.db changed (%v)", c.name, err)
		}
		if _, err := os.Stat(filepath.Join(r.dir, sqlitestore.DBFile+".pre-restore")); err == nil {
			t.Errorf("%s: a refused restore kept a pre-restore copy", c.name)
		}
	}
	ents, _ := os.ReadDir(r.dir)
	for _, e := range ents {
		if filepath.Ext(e.Name()) != ".db" && e.Name() != sqlitestore.LockFile && e.Name() != relayserver.KeyFile && e.Name() != sqlitestore.BallastFile {
			t.Errorf("a refused restore left %s behind", e.Name())
		}
	}
	r.start()
	if p := r.pull(b, 0); p.Epoch != epoch || len(p.Items) != 2 {
		t.Fatalf("after refused restores: %+v, want epoch %s and both items", p, epoch)
	}
	// --force restores the other relay's backup; this relay's key then refuses the store.
	r.stop()
	if _, err := sqlitestore.Restore(bg, r.dir, other, &sqlitestore.RestoreOptions{Force: true}); err != nil {
		t.Fatalf("forced restore: %v", err)
	}
	if _, _, err := r.open(); !errors.Is(err, relayserver.ErrRelayKeyMismatch) {
		t.Fatalf("serving a forced restore of another relay's backup = %v, want ErrRelayKeyMismatch", err)
	}
}

func TestRotateEpochKeepsItems(t *testing.T) {
	t.Parallel()
	r, a, b, _ := setup(t, nil)
	r.push(a, envItem("01KKNTQ69NA67N0QBPXKXFN501", b))
	old := r.srv.Epoch()
	if _, err := r.store.RotateEpoch(bg); err != nil {
		t.Fatal(err)
	}
	r.restart()
	if p := r.pull(b, 0); p.Epoch == old || p.Epoch != r.srv.Epoch() || len(p.Items) != 1 {
		t.Fatalf("after rotate-epoch: %+v (old epoch %s)", p, old)
	}
}
