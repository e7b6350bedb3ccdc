package sqlitestore

import (
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/relayserver"
	"github.com/agentmbx/agentmbx/relayserver/storetest"
)

// writeV4Store leaves in dir a schema-4 store as the binaries before schema 5 wrote it: the DDL of
// migrations 0→4 (unchanged since), key rows, and items inserted the way their InsertItem did (its
// items_queued trigger wrote the dedup rows, the seq counter and the usage counters), one of them
// acked since (its dedup row is a tombstone).
func writeV4Store(t *testing.T, dir, tgt, snd, snd2, hexHash string) {
	t.Helper()
	writeOldStore(t, dir, 4, []oldRow{
		{"INSERT INTO meta VALUES('epoch', 'v4-epoch'), ('relay_pubkey', 'R')", nil},
		{"INSERT INTO keys(id, pubkey) VALUES(1, ?1), (2, ?2), (3, ?3)", []any{tgt, snd, snd2}},
		{`INSERT INTO items(target, seq, kind, item_id, sender, wire_hash, bytes, accepted_at, expires_at, wire)
			VALUES(1, 999, 'envelope', 'acked', 2, unhex(?1), 5, 999, 8999, x'6162636465')`, []any{hexHash}},
		{`INSERT INTO items(target, seq, kind, item_id, sender, wire_hash, bytes, accepted_at, expires_at, wire)
			VALUES(1, 1000, 'envelope', 'i1', 2, unhex(?1), 5, 1000, 9000, x'6162636465')`, []any{hexHash}},
		{`INSERT INTO items(target, seq, kind, item_id, sender, wire_hash, bytes, accepted_at, expires_at, wire)
			VALUES(1, 1001, 'receipt', 'i2', 3, 'not-hex', 3, 1001, 9001, x'616263')`, nil},
		// Ack through 999 as schema 4 did: the item goes, its counters drop, its dedup row stays.
		{"DELETE FROM items WHERE target = 1 AND seq <= 999", nil},
		{"UPDATE usage SET items = items - 1, bytes = bytes - 5 WHERE target_pubkey = ?1 AND sender_pubkey IN ('', ?2)", []any{tgt, snd}},
		{"INSERT INTO acked VALUES(?1, 999)", []any{tgt}},
	})
}

// A store written with schema 4 opens as the current schema without the trigger, with its queue, seqs, dedup
// rows (the tombstone too) and counters as they were, and goes on from there: new items take the
// next seqs and count on top of the migrated counters, and the counters reach the tables.
func TestUpgradeFromVersion4KeepsQueueCountersAndDedup(t *testing.T) {
	dir := t.TempDir()
	tgt, snd, snd2 := key(1), key(2), "sender-key-that-is-not-base64"
	hexHash := storetest.Hash([]byte("abcde"))
	writeV4Store(t, dir, tgt, snd, snd2, hexHash)

	s := openT(t, dir)
	if m, err := s.Meta(ctx); err != nil || m.SchemaVersion != SchemaVersion || m.Epoch != "v4-epoch" {
		t.Fatalf("meta after upgrade = %+v, %v; want schema %d, epoch v4-epoch", m, err, SchemaVersion)
	}
	// Schema 6 counts each sender's dedup rows, the tombstone included.
	if n, err := s.DedupRows(ctx); err != nil || n != 3 {
		t.Errorf("dedup rows after upgrade = %d, %v; want 3", n, err)
	}
	if r, err := s.Usage(ctx, 10); err != nil || len(r.Keys) != 3 || r.Keys[0].Pubkey != snd || r.Keys[0].DedupRows != 2 {
		t.Errorf("usage after upgrade = %+v, %v; want %s first with 2 dedup rows", r, err, snd)
	}
	var triggers int
	if err := s.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM sqlite_master WHERE type = 'trigger'").Scan(&triggers); err != nil || triggers != 0 {
		t.Fatalf("triggers after upgrade = %d, %v; want none", triggers, err)
	}
	p, err := s.Pull(ctx, tgt, 0, 10, 1<<20)
	if err != nil || p.HeadSeq != 1001 || p.AckedThrough != 999 || len(p.Items) != 2 ||
		p.Items[0].ItemID != "i1" || p.Items[0].Sender != snd || p.Items[0].WireHash != hexHash ||
		p.Items[1].ItemID != "i2" || p.Items[1].Sender != snd2 || p.Items[1].WireHash != "not-hex" {
		t.Fatalf("pull after upgrade = %+v, %v; want head 1001, acked 999, i1 and i2", p, err)
	}
	want := checkGoesOn(t, s, tgt, snd, snd2, hexHash)
	s.Close()
	// The tables hold what the writer counted in memory.
	s = openT(t, dir)
	if u := usageOf(t, s, tgt, snd); u != want {
		t.Errorf("usage read back from the tables = %+v, want %+v", u, want)
	}
	if h, err := s.Head(ctx, tgt); err != nil || h.HeadSeq != 1002 {
		t.Errorf("head read back = %+v, %v; want 1002", h, err)
	}
}

// usageOf reads Usage in a unit of its own.
func usageOf(t *testing.T, s *Store, target, sender string) relayserver.Usage {
	t.Helper()
	var u relayserver.Usage
	if err := s.Update(ctx, func(tx relayserver.Tx) (err error) { u, err = tx.Usage(target, sender); return err }); err != nil {
		t.Fatal(err)
	}
	return u
}

// snapshot is what a store says about a set of queues: heads and counters.
type snapshot map[string]any

func snap(t *testing.T, s *Store, targets, senders []string) snapshot {
	t.Helper()
	out := snapshot{}
	err := s.Update(ctx, func(tx relayserver.Tx) error {
		for _, tg := range targets {
			h, err := tx.Head(tg)
			if err != nil {
				return err
			}
			out["head "+tg] = h
			for _, sn := range senders {
				u, err := tx.Usage(tg, sn)
				if err != nil {
					return err
				}
				out["usage "+tg+" "+sn] = u
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tg := range targets {
		h, err := s.Head(ctx, tg)
		if err != nil {
			t.Fatal(err)
		}
		if h != out["head "+tg] {
			t.Errorf("head of %s: the writer says %+v, a reader %+v", tg, out["head "+tg], h)
		}
	}
	return out
}

// The counters the writer keeps in memory always equal the tables: after inserts, a failed unit,
// a failed commit, a unit that fails after writing, acks, expiry and a rotation, a reopened store
// (which reads them from the tables) sees the same heads and usage as the writer did.
func TestCountersInMemoryMatchTheTables(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir)
	tA, tB, s1, s2 := key(1), key(2), key(3), key(4)
	targets, senders := []string{tA, tB, key(9)}, []string{s1, s2, key(8)}
	at := time.Now().UnixMilli()
	for i, id := range []string{"a", "b", "c", "d"} {
		insert(t, s, item([]string{tA, tB}[i%2], []string{s1, s2}[i/2], id, "wire-"+id, at))
	}
	before := snap(t, s, targets, senders)

	// A failed unit and a failed commit change nothing.
	boom := errors.New("boom")
	if err := s.Update(ctx, func(tx relayserver.Tx) error {
		if _, err := tx.InsertItem(item(tA, s1, "x", "xx", at)); err != nil {
			return err
		}
		return boom
	}); !errors.Is(err, boom) {
		t.Fatalf("failed unit = %v", err)
	}
	s.w.beforeCommit = func(int) error { return boom }
	if err := s.Update(ctx, func(tx relayserver.Tx) error {
		_, err := tx.InsertItem(item(tA, s1, "y", "yy", at))
		return err
	}); !errors.Is(err, relayserver.ErrCommit) {
		t.Fatalf("failed commit = %v, want ErrCommit", err)
	}
	s.w.beforeCommit = nil
	after := snap(t, s, targets, senders)
	for k, v := range before {
		if after[k] != v {
			t.Errorf("%s after failures = %+v, want %+v", k, after[k], v)
		}
	}

	// A unit failing inside a savepoint, next to one that stays.
	if err := s.Update(ctx, func(tx relayserver.Tx) error {
		if err := tx.Unit(func(tx relayserver.Tx) error {
			if _, err := tx.InsertItem(item(tB, s2, "gone", "gone", at)); err != nil {
				return err
			}
			return boom
		}); !errors.Is(err, boom) {
			t.Errorf("unit = %v, want boom", err)
		}
		_, err := tx.InsertItem(item(tB, s2, "kept", "kept", at))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	storetest.Ack(t, s, tA, before["head "+tA].(relayserver.Head).HeadSeq)
	if err := s.Update(ctx, func(tx relayserver.Tx) error {
		items, err := tx.ExpiredItems(time.UnixMilli(at+15*86400_000), 1)
		if err != nil || len(items) != 1 {
			return errors.Join(err, errors.New("want one expired item"))
		}
		_, err = tx.DeleteItem(items[0].Target, items[0].Seq)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.Update(ctx, func(tx relayserver.Tx) error {
		return tx.PutEnrolment(relayserver.Enrolment{HostPubkey: tB, HostName: "host-b", AuthorizedBy: "host-key",
			EnrolledAt: time.UnixMilli(at)})
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.Update(ctx, func(tx relayserver.Tx) error {
		if _, err := tx.InsertItem(item(tB, s1, "before-rotation", "br", at)); err != nil {
			return err
		}
		_, err := tx.Rotate(relayserver.Rotation{OldPubkey: tB, NewPubkey: key(9), At: time.UnixMilli(at + 1)})
		if err != nil {
			return err
		}
		_, err = tx.InsertItem(item(key(9), s2, "after-rotation", "ar", at+2))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	insert(t, s, item(key(9), key(8), "last", "last", at+3))
	want := snap(t, s, targets, senders)
	s.Close()
	s = openT(t, dir)
	got := snap(t, s, targets, senders)
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s read back = %+v, the writer said %+v", k, got[k], v)
		}
	}
	// B held b, d and kept, one of them expired; before-rotation moved with them; two came after.
	if u := want["usage "+key(9)+" "+s2].(relayserver.Usage); u.Target.Items != 5 {
		t.Errorf("usage of the rotated queue = %+v, want 5 items", u)
	}
}

// A wire hash of 64 lowercase hex digits is kept as its 32 bytes; any other text as it is, so
// every hash reads back exactly as written.
func TestPackHashKeepsOnlyLowercaseHexAsBytes(t *testing.T) {
	lower := storetest.Hash([]byte("x"))
	for _, h := range []string{lower, strings.ToUpper(lower), lower[:63], lower[:63] + "g", "not-hex", ""} {
		packed := packHash(h)
		b, isBytes := packed.([]byte)
		if want := h == lower; isBytes != want {
			t.Errorf("packHash(%q) is %T, want bytes: %v", h, packed, want)
		}
		if isBytes {
			if len(b) != 32 || hex.EncodeToString(b) != h {
				t.Errorf("packHash(%q) = %x", h, b)
			}
		}
		var back string
		if err := (hashCol{&back}).Scan(packed); err != nil || back != h {
			t.Errorf("hash %q read back as %q, %v", h, back, err)
		}
	}
}
