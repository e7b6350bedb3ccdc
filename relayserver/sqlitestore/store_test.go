package sqlitestore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/relayserver"
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

var t0Bench = time.UnixMilli(1773480413589)

func key(n int) string { return fmt.Sprintf("%043d=", n) }

func hash(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

func item(target, sender, id string, wire string, at int64) relayserver.Item {
	return relayserver.Item{Target: target, Kind: relayserver.KindEnvelope, ItemID: id, Sender: sender,
		Wire: []byte(wire), WireHash: hash([]byte(wire)), AcceptedAt: time.UnixMilli(at),
		ExpiresAt: time.UnixMilli(at + 14*86400_000)}
}

func insert(t *testing.T, s *Store, it relayserver.Item) int64 {
	t.Helper()
	var seq int64
	err := s.Update(ctx, func(tx relayserver.Tx) error {
		var err error
		seq, err = tx.InsertItem(it)
		return err
	})
	if err != nil {
		t.Fatalf("InsertItem(%s): %v", it.ItemID, err)
	}
	return seq
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
		"DROP TABLE sender_list_members", "DROP TABLE usage",
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

func TestSeqIsMaxOfNextAndNowAndNeverReused(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir)
	tgt, snd := key(1), key(2)
	steps := []struct {
		id   string
		at   int64
		want int64
	}{
		{"a", 1000, 1000}, // empty queue: now_ms
		{"b", 1000, 1001}, // same ms: next_seq
		{"c", 500, 1002},  // clock went back: next_seq
		{"d", 5000, 5000}, // clock ahead: now_ms
	}
	for _, st := range steps {
		if got := insert(t, s, item(tgt, snd, st.id, st.id, st.at)); got != st.want {
			t.Fatalf("seq of %s at %d = %d, want %d", st.id, st.at, got, st.want)
		}
	}
	err := s.Update(ctx, func(tx relayserver.Tx) error { _, err := tx.Ack(tgt, 5000); return err })
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = openT(t, dir)
	if got := insert(t, s, item(tgt, snd, "e", "e", 10)); got != 5001 {
		t.Fatalf("seq after ack and reopen = %d, want 5001", got)
	}
}

func TestDuplicateInsertRefused(t *testing.T) {
	s := openT(t, t.TempDir())
	insert(t, s, item(key(1), key(2), "x", "w", 1))
	err := s.Update(ctx, func(tx relayserver.Tx) error {
		_, err := tx.InsertItem(item(key(1), key(2), "x", "w", 2))
		return err
	})
	if !errors.Is(err, relayserver.ErrDuplicate) {
		t.Fatalf("second insert = %v, want ErrDuplicate", err)
	}
	// The refusal changes nothing, even for a caller that goes on in the same unit.
	before, _ := s.Head(ctx, key(1))
	err = s.Update(ctx, func(tx relayserver.Tx) error {
		if _, err := tx.InsertItem(item(key(1), key(2), "x", "w", 5000)); !errors.Is(err, relayserver.ErrDuplicate) {
			return fmt.Errorf("repeat insert = %v, want ErrDuplicate", err)
		}
		u, err := tx.Usage(key(1), key(2))
		if err != nil {
			return err
		}
		if want := (relayserver.Counts{Items: 1, Bytes: 1}); u.Target != want || u.Sender != want {
			return fmt.Errorf("usage after a refused insert = %+v, want %+v for both", u, want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if after, _ := s.Head(ctx, key(1)); after != before {
		t.Fatalf("head after a refused insert = %+v, want %+v", after, before)
	}
	// Same id for another target, or from another sender, is another row.
	insert(t, s, item(key(3), key(2), "x", "w", 3))
	insert(t, s, item(key(1), key(4), "x", "w", 3))
}

func TestFailedUnitStoresNothing(t *testing.T) {
	s := openT(t, t.TempDir())
	boom := errors.New("boom")
	err := s.Update(ctx, func(tx relayserver.Tx) error {
		if _, err := tx.InsertItem(item(key(1), key(2), "a", "a", 1)); err != nil {
			return err
		}
		if _, err := tx.InsertItem(item(key(3), key(2), "a", "a", 1)); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Update = %v, want boom", err)
	}
	for _, tgt := range []string{key(1), key(3)} {
		p, _ := s.Pull(ctx, tgt, 0, 10, 1<<20)
		if len(p.Items) != 0 || p.HeadSeq != 0 {
			t.Fatalf("after failed unit, target %s has %+v, want nothing", tgt, p)
		}
	}
	// A failed nested unit undoes only itself.
	err = s.Update(ctx, func(tx relayserver.Tx) error {
		if _, err := tx.InsertItem(item(key(1), key(2), "keep", "k", 1)); err != nil {
			return err
		}
		if err := tx.Unit(func(tx relayserver.Tx) error {
			if _, err := tx.InsertItem(item(key(1), key(2), "drop", "d", 1)); err != nil {
				return err
			}
			return boom
		}); !errors.Is(err, boom) {
			t.Errorf("nested Unit = %v, want boom", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	p, _ := s.Pull(ctx, key(1), 0, 10, 1<<20)
	if len(p.Items) != 1 || p.Items[0].ItemID != "keep" {
		t.Fatalf("after nested failure got %+v, want only keep", p.Items)
	}
	u := usage(t, s, key(1), key(2))
	if u.Target.Items != 1 || u.Target.Bytes != 1 {
		t.Fatalf("usage after nested failure = %+v, want 1 item, 1 byte", u)
	}
}

func usage(t *testing.T, s *Store, target, sender string) relayserver.Usage {
	t.Helper()
	var u relayserver.Usage
	if err := s.Update(ctx, func(tx relayserver.Tx) error {
		var err error
		u, err = tx.Usage(target, sender)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return u
}

// holdWriter makes the writer run a unit that blocks until release is closed, and returns once
// that unit is running, so the test can queue more units behind it deterministically.
func holdWriter(t *testing.T, s *Store, release chan struct{}) chan error {
	started := make(chan struct{})
	res := make(chan error, 1)
	go func() {
		res <- s.Update(ctx, func(tx relayserver.Tx) error {
			close(started)
			<-release
			_, err := tx.InsertItem(item(key(9), key(8), "first", "f", 1))
			return err
		})
	}()
	<-started
	return res
}

func waitQueued(t *testing.T, s *Store, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for len(s.w.reqs) < n {
		if time.Now().After(deadline) {
			t.Fatalf("only %d units queued, want %d", len(s.w.reqs), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// runQueued queues n units behind the writer that holdWriter holds (unit i inserts an item from
// sender key(i)), releases it once all are queued, and returns each unit's error.
func runQueued(t *testing.T, s *Store, release chan struct{}, n int) []error {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.Update(ctx, func(tx relayserver.Tx) error {
				_, err := tx.InsertItem(item(key(9), key(i), "x", "w", 1))
				return err
			})
		}()
	}
	waitQueued(t, s, n)
	close(release)
	wg.Wait()
	return errs
}

func TestGroupCommitCarriesConcurrentUnits(t *testing.T) {
	s := openT(t, t.TempDir())
	var sizes []int
	s.w.beforeCommit = func(n int) error { sizes = append(sizes, n); return nil }
	release := make(chan struct{})
	first := holdWriter(t, s, release)
	const n = 10
	errs := runQueued(t, s, release, n)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("unit %d: %v", i, err)
		}
	}
	if len(sizes) != 1 || sizes[0] != n+1 {
		t.Fatalf("commit group sizes = %v, want one commit of %d units", sizes, n+1)
	}
}

func TestFailedCommitFailsEveryUnitInIt(t *testing.T) {
	s := openT(t, t.TempDir())
	failNext := true
	s.w.beforeCommit = func(int) error {
		if failNext {
			failNext = false
			return errors.New("disk full")
		}
		return nil
	}
	release := make(chan struct{})
	first := holdWriter(t, s, release)
	const n = 5
	errs := runQueued(t, s, release, n)
	if err := <-first; !errors.Is(err, relayserver.ErrCommit) {
		t.Fatalf("first unit = %v, want ErrCommit", err)
	}
	for i, err := range errs {
		if !errors.Is(err, relayserver.ErrCommit) {
			t.Fatalf("unit %d = %v, want ErrCommit", i, err)
		}
	}
	p, _ := s.Pull(ctx, key(9), 0, 100, 1<<20)
	if len(p.Items) != 0 || p.HeadSeq != 0 {
		t.Fatalf("after failed commit the queue holds %+v, want nothing", p)
	}
	// The writer recovers: the next unit commits.
	insert(t, s, item(key(9), key(1), "after", "a", 1))
}

func TestPullPagesAndAck(t *testing.T) {
	s := openT(t, t.TempDir())
	tgt := key(1)
	var seqs []int64
	for i := range 5 {
		seqs = append(seqs, insert(t, s, item(tgt, key(2), fmt.Sprint(i), fmt.Sprintf("%0100d", i), 100)))
	}
	p, err := s.Pull(ctx, tgt, 0, 2, 1<<20)
	if err != nil || len(p.Items) != 2 || !p.More || p.HeadSeq != seqs[4] || p.Items[1].Seq != seqs[1] {
		t.Fatalf("pull limit 2 = %+v, %v", p, err)
	}
	// Byte cap: 250 bytes fits two 100-byte items.
	p, _ = s.Pull(ctx, tgt, seqs[1], 10, 250)
	if len(p.Items) != 2 || !p.More || p.Items[0].Seq != seqs[2] {
		t.Fatalf("pull 250 bytes = %d items more=%v, want 2, true", len(p.Items), p.More)
	}
	// At least one item even when it alone is over the cap.
	p, _ = s.Pull(ctx, tgt, seqs[1], 10, 10)
	if len(p.Items) != 1 || !p.More {
		t.Fatalf("pull 10 bytes = %d items, want 1", len(p.Items))
	}
	p, _ = s.Pull(ctx, tgt, seqs[4], 10, 1<<20)
	if len(p.Items) != 0 || p.More {
		t.Fatalf("pull past head = %+v, want empty", p)
	}

	var res relayserver.AckResult
	err = s.Update(ctx, func(tx relayserver.Tx) error { res, err = tx.Ack(tgt, seqs[2]); return err })
	if err != nil || res.Deleted != 3 || res.AckedThrough != seqs[2] || res.HeadSeq != seqs[4] {
		t.Fatalf("ack = %+v, %v; want 3 deleted", res, err)
	}
	if u := usage(t, s, tgt, key(2)); u.Target.Items != 2 || u.Sender.Bytes != 200 {
		t.Fatalf("usage after ack = %+v, want 2 items, 200 bytes", u)
	}
	err = s.Update(ctx, func(tx relayserver.Tx) error { _, err := tx.Ack(tgt, seqs[4]+1); return err })
	if !errors.Is(err, relayserver.ErrBadAck) {
		t.Fatalf("ack beyond head = %v, want ErrBadAck", err)
	}
	h, _ := s.Head(ctx, tgt)
	if h.AckedThrough != seqs[2] {
		t.Fatalf("acked_through after BAD_ACK = %d, want %d", h.AckedThrough, seqs[2])
	}
}

func enrol(t *testing.T, s *Store, e relayserver.Enrolment) error {
	t.Helper()
	return s.Update(ctx, func(tx relayserver.Tx) error { return tx.PutEnrolment(e) })
}

func TestEnrolmentNamesAndRevocation(t *testing.T) {
	s := openT(t, t.TempDir())
	at := time.UnixMilli(1000)
	// Two owners' "macbook" without a proven account coexist.
	for i := range 2 {
		if err := enrol(t, s, relayserver.Enrolment{HostPubkey: key(i), HostName: "macbook",
			AuthorizedBy: "host-key", EnrolledAt: at}); err != nil {
			t.Fatalf("enrol %d: %v", i, err)
		}
	}
	// Inside one proven account the name is unique, case-insensitively.
	if err := enrol(t, s, relayserver.Enrolment{HostPubkey: key(10), HostName: "Box", Account: "acct",
		AuthorizedBy: "token", AuthorityRank: 10, EnrolledAt: at}); err != nil {
		t.Fatal(err)
	}
	err := enrol(t, s, relayserver.Enrolment{HostPubkey: key(11), HostName: "box", Account: "acct",
		AuthorizedBy: "token", AuthorityRank: 10, EnrolledAt: at})
	if !errors.Is(err, relayserver.ErrNameTaken) {
		t.Fatalf("same name in the same account = %v, want ErrNameTaken", err)
	}
	if err := enrol(t, s, relayserver.Enrolment{HostPubkey: key(11), HostName: "box", Account: "other",
		AuthorizedBy: "token", AuthorityRank: 10, EnrolledAt: at}); err != nil {
		t.Fatalf("same name in another account: %v", err)
	}
	got, err := s.EnrolmentsByName(ctx, "MACBOOK", 100)
	if err != nil || len(got) != 2 {
		t.Fatalf("EnrolmentsByName(MACBOOK) = %d, %v; want 2", len(got), err)
	}
	// Revoked stays revoked, whatever a later put says.
	err = s.Update(ctx, func(tx relayserver.Tx) error {
		_, err := tx.Rotate(relayserver.Rotation{OldPubkey: key(0), NewPubkey: key(5), HostName: "macbook", At: at})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := enrol(t, s, relayserver.Enrolment{HostPubkey: key(0), HostName: "macbook",
		AuthorizedBy: "host-key", EnrolledAt: at}); err != nil {
		t.Fatal(err)
	}
	e, err := s.Enrolment(ctx, key(0))
	if err != nil || e.Live() {
		t.Fatalf("re-put of a revoked key = %+v, %v; want still revoked", e, err)
	}
	var live int64
	_ = s.Update(ctx, func(tx relayserver.Tx) error { live, err = tx.LiveEnrolments(); return err })
	if live != 4 {
		t.Fatalf("live enrolments = %d, want 4", live)
	}
}

func TestSenderListAllowed(t *testing.T) {
	s := openT(t, t.TempDir())
	err := s.Update(ctx, func(tx relayserver.Tx) error {
		if ok, _ := tx.SenderAllowed(key(1), key(2)); !ok {
			t.Errorf("no list: sender refused")
		}
		if err := tx.PutSenderList(relayserver.SenderList{TargetPubkey: key(1), Senders: []string{key(2)},
			IAT: time.UnixMilli(5), Record: []byte("{}"), Sig: "s"}); err != nil {
			return err
		}
		if ok, _ := tx.SenderAllowed(key(1), key(2)); !ok {
			t.Errorf("listed sender refused")
		}
		if ok, _ := tx.SenderAllowed(key(1), key(3)); ok {
			t.Errorf("unlisted sender allowed")
		}
		// A newer empty list refuses everyone.
		if err := tx.PutSenderList(relayserver.SenderList{TargetPubkey: key(1), IAT: time.UnixMilli(6),
			Record: []byte("{}"), Sig: "s"}); err != nil {
			return err
		}
		if ok, _ := tx.SenderAllowed(key(1), key(2)); ok {
			t.Errorf("empty list allows a sender")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	l, err := s.SenderList(ctx, key(1))
	if err != nil || len(l.Senders) != 0 || l.IAT.UnixMilli() != 6 {
		t.Fatalf("SenderList = %+v, %v", l, err)
	}
}

func TestRotateMovesQueueAfterNewKeysItems(t *testing.T) {
	s := openT(t, t.TempDir())
	old, nw, snd, other := key(1), key(2), key(3), key(4)
	at := time.UnixMilli(1)
	for _, k := range []string{old, nw, snd, other} {
		if err := enrol(t, s, relayserver.Enrolment{HostPubkey: k, HostName: "h" + k[40:43],
			AuthorizedBy: "host-key", EnrolledAt: at}); err != nil {
			t.Fatal(err)
		}
	}
	o1Seq := insert(t, s, item(old, snd, "o1", "o1", 100))
	insert(t, s, item(old, snd, "o2", "o2", 100))
	insert(t, s, item(old, snd, "both", "b", 100))
	insert(t, s, item(nw, snd, "n1", "n1", 100))
	insert(t, s, item(nw, snd, "both", "b", 100))
	err := s.Update(ctx, func(tx relayserver.Tx) error {
		if err := tx.PutSenderList(relayserver.SenderList{TargetPubkey: old, Senders: []string{snd},
			IAT: at, Record: []byte("{}"), Sig: "s"}); err != nil {
			return err
		}
		return tx.PutSenderList(relayserver.SenderList{TargetPubkey: other, Senders: []string{old},
			IAT: at, Record: []byte("{}"), Sig: "s"})
	})
	if err != nil {
		t.Fatal(err)
	}
	var res relayserver.RotateResult
	err = s.Update(ctx, func(tx relayserver.Tx) error {
		res, err = tx.Rotate(relayserver.Rotation{OldPubkey: old, NewPubkey: nw, HostName: "renamed",
			At: time.UnixMilli(50)})
		return err
	})
	if err != nil || res.MovedItems != 2 {
		t.Fatalf("Rotate = %+v, %v; want 2 moved", res, err)
	}
	p, _ := s.Pull(ctx, nw, 0, 100, 1<<20)
	var ids []string
	last := int64(0)
	for _, it := range p.Items {
		ids = append(ids, it.ItemID)
		if it.Seq <= last {
			t.Fatalf("seqs not increasing: %+v", p.Items)
		}
		last = it.Seq
	}
	if fmt.Sprint(ids) != "[n1 both o1 o2]" {
		t.Fatalf("new key's queue = %v, want [n1 both o1 o2]", ids)
	}
	if p, _ := s.Pull(ctx, old, 0, 100, 1<<20); len(p.Items) != 0 {
		t.Fatalf("old key still has %d items", len(p.Items))
	}
	if u := usage(t, s, nw, snd); u.Target.Items != 4 || u.Sender.Items != 4 {
		t.Fatalf("usage of the new key = %+v, want 4 items", u)
	}
	err = s.Update(ctx, func(tx relayserver.Tx) error {
		d, err := tx.Dedup(snd, "o1", nw)
		if err != nil || d.Seq != p.Items[2].Seq {
			t.Errorf("dedup of o1 for the new key = %+v, %v; want seq %d", d, err, p.Items[2].Seq)
		}
		// The old key's row stays: a retry still addressed to it is a duplicate, not a refusal.
		if d, err := tx.Dedup(snd, "o1", old); err != nil || d.Seq != o1Seq || d.WireHash != hash([]byte("o1")) {
			t.Errorf("dedup of o1 for the old key = %+v, %v; want seq %d kept", d, err, o1Seq)
		}
		if ok, _ := tx.SenderAllowed(nw, snd); !ok {
			t.Errorf("the allowlist did not move to the new key")
		}
		if ok, _ := tx.SenderAllowed(nw, other); ok {
			t.Errorf("the moved allowlist lets in an unlisted sender")
		}
		if ok, _ := tx.SenderAllowed(other, nw); !ok {
			t.Errorf("other target's allowlist still names only the old key")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	e, _ := s.Enrolment(ctx, old)
	n, _ := s.Enrolment(ctx, nw)
	if e.Live() || !n.Live() || n.HostName != "renamed" {
		t.Fatalf("after rotation old=%+v new=%+v; want old revoked, new live and renamed", e, n)
	}
	// The new key must not be revoked; rotating into the old one fails and changes nothing.
	err = s.Update(ctx, func(tx relayserver.Tx) error {
		_, err := tx.Rotate(relayserver.Rotation{OldPubkey: nw, NewPubkey: old, At: time.UnixMilli(60)})
		return err
	})
	if !errors.Is(err, relayserver.ErrRevoked) {
		t.Fatalf("rotation into a revoked key = %v, want ErrRevoked", err)
	}
}

func TestBindRelayKey(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir)
	if err := s.BindRelayKey(ctx, "KEY-A"); err != nil {
		t.Fatal(err)
	}
	if err := s.BindRelayKey(ctx, "KEY-A"); err != nil {
		t.Fatalf("rebinding the same key: %v", err)
	}
	if err := s.BindRelayKey(ctx, "KEY-B"); !errors.Is(err, relayserver.ErrRelayKeyMismatch) {
		t.Fatalf("binding another key = %v, want ErrRelayKeyMismatch", err)
	}
	m, _ := s.Meta(ctx)
	if m.RelayPubkey != "KEY-A" {
		t.Fatalf("relay key = %q, want KEY-A", m.RelayPubkey)
	}
}

func TestRotateEpochAndHeartbeat(t *testing.T) {
	s := openT(t, t.TempDir())
	m, _ := s.Meta(ctx)
	e, err := s.RotateEpoch(ctx)
	if err != nil || e == m.Epoch {
		t.Fatalf("RotateEpoch = %q, %v; want a new epoch", e, err)
	}
	if err := s.Heartbeat(ctx, time.UnixMilli(123456)); err != nil {
		t.Fatal(err)
	}
	m, _ = s.Meta(ctx)
	if m.Epoch != e || m.Heartbeat.UnixMilli() != 123456 {
		t.Fatalf("meta = %+v", m)
	}
}

func TestClosedStoreRefusesUpdates(t *testing.T) {
	s := openT(t, t.TempDir())
	s.Close()
	err := s.Update(ctx, func(relayserver.Tx) error { return nil })
	if !errors.Is(err, relayserver.ErrClosed) {
		t.Fatalf("Update after Close = %v, want ErrClosed", err)
	}
}

// TestAdmissionMatchesParts checks that the one-statement Admission reads what Dedup, Enrolment,
// SenderAllowed, Usage and AccountUsage read one by one, over targets in every state.
func TestAdmissionMatchesParts(t *testing.T) {
	s := openT(t, t.TempDir())
	at := time.UnixMilli(1000)
	snd, other := key(90), key(91)
	// 1: plain host with items; 2, 3: hosts of account "acme" with items; 4: revoked member of
	// acme with items (not charged to the account); 5: allowlist without snd; 6: allowlist with
	// snd; 7: never enrolled.
	for i, e := range []relayserver.Enrolment{
		{HostPubkey: key(1), HostName: "one"},
		{HostPubkey: key(2), HostName: "two", Account: "acme", Org: "o", AuthorizedBy: "sso", AuthorityRank: 2},
		{HostPubkey: key(3), HostName: "three", Account: "acme", AuthorizedBy: "sso", AuthorityRank: 2},
		{HostPubkey: key(4), HostName: "four", Account: "acme", AuthorizedBy: "sso", AuthorityRank: 2, RevokedAt: at},
		{HostPubkey: key(5), HostName: "five"},
		{HostPubkey: key(6), HostName: "six"},
	} {
		e.EnrolledAt = at.Add(time.Duration(i) * time.Millisecond)
		if e.AuthorizedBy == "" {
			e.AuthorizedBy = "host-key"
		}
		if err := enrol(t, s, e); err != nil {
			t.Fatal(err)
		}
	}
	for i, tgt := range []string{key(1), key(2), key(2), key(3), key(4)} {
		insert(t, s, item(tgt, snd, fmt.Sprintf("s%d", i), fmt.Sprintf("wire-%d", i), 2000))
		insert(t, s, item(tgt, other, fmt.Sprintf("o%d", i), fmt.Sprintf("other-wire-%d", i*i), 2000))
	}
	err := s.Update(ctx, func(tx relayserver.Tx) error {
		if err := tx.PutSenderList(relayserver.SenderList{TargetPubkey: key(5), Senders: []string{other}, IAT: at, Record: []byte("{}")}); err != nil {
			return err
		}
		return tx.PutSenderList(relayserver.SenderList{TargetPubkey: key(6), Senders: []string{other, snd}, IAT: at, Record: []byte("{}")})
	})
	if err != nil {
		t.Fatal(err)
	}
	err = s.Update(ctx, func(tx relayserver.Tx) error {
		for _, c := range []struct{ sender, id, target string }{
			{snd, "s0", key(1)}, {snd, "new", key(1)}, {other, "s0", key(1)},
			{snd, "s1", key(2)}, {snd, "new", key(3)}, {snd, "s4", key(4)},
			{snd, "new", key(5)}, {other, "new", key(5)}, {snd, "new", key(6)}, {snd, "new", key(7)},
		} {
			got, err := tx.Admission(c.sender, c.id, c.target)
			if err != nil {
				return err
			}
			want := relayserver.Admission{Dedup: relayserver.Dedup{Sender: c.sender, ItemID: c.id, Target: c.target}}
			if d, err := tx.Dedup(c.sender, c.id, c.target); err == nil {
				want.Duplicate, want.Dedup = true, d
			} else if !errors.Is(err, relayserver.ErrNotFound) {
				return err
			}
			if e, err := tx.Enrolment(c.target); err == nil {
				want.Enrolled, want.Target = true, e
				if e.Account != "" {
					if want.Account, err = tx.AccountUsage(e.Account); err != nil {
						return err
					}
				}
			} else if !errors.Is(err, relayserver.ErrNotFound) {
				return err
			}
			if want.Allowed, err = tx.SenderAllowed(c.target, c.sender); err != nil {
				return err
			}
			if want.Usage, err = tx.Usage(c.target, c.sender); err != nil {
				return err
			}
			if got != want {
				t.Errorf("Admission(%s, %s, %s)\n got %+v\nwant %+v", c.sender[40:], c.id, c.target[40:], got, want)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// The states above are all there: a duplicate, an account charge, a refusal by allowlist.
	err = s.Update(ctx, func(tx relayserver.Tx) error {
		a, err := tx.Admission(snd, "new", key(3))
		if err != nil {
			return err
		}
		if a.Account.Items != 6 || !a.Enrolled || a.Duplicate || !a.Allowed || a.Usage.Sender.Items != 1 {
			return fmt.Errorf("admission to acme's three = %+v, want 6 items charged to acme", a)
		}
		if a, _ := tx.Admission(snd, "new", key(5)); a.Allowed {
			return fmt.Errorf("admission by a sender off five's allowlist = %+v", a)
		}
		if a, _ := tx.Admission(snd, "s1", key(2)); !a.Duplicate || a.Dedup.Seq == 0 {
			return fmt.Errorf("admission of a stored item = %+v", a)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
