package sqlitestore

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/relayserver"
	"github.com/agentmbx/agentmbx/relayserver/storetest"
)

// writeV2Store leaves in dir a schema-2 store as the binaries before schema 3 wrote it: the DDL of
// migrations 0→1→2 (unchanged since), then the rows their InsertItem, Ack and sweep wrote (base64
// keys as text in items and dedup, hex wire hashes, a dedup tombstone of an acked item).
func writeV2Store(t *testing.T, dir string, tgt, snd, snd2, hexHash string) {
	t.Helper()
	writeOldStore(t, dir, 2, []oldRow{
		{"INSERT INTO meta VALUES('epoch', 'v2-epoch'), ('relay_pubkey', 'R')", nil},
		{`INSERT INTO items(target_pubkey, seq, kind, item_id, sender_pubkey, wire_hash, bytes, accepted_at,
			expires_at, wire) VALUES(?1, 1000, 'envelope', 'i1', ?2, ?4, 5, 1000, 9000, x'6162636465'),
			(?1, 1001, 'receipt', 'i2', ?3, 'not-hex', 3, 1001, 9001, x'616263')`, []any{tgt, snd, snd2, hexHash}},
		{`INSERT INTO dedup(sender_pubkey, item_id, target_pubkey, wire_hash, seq, accepted_at) VALUES
			(?2, 'i1', ?1, ?4, 1000, 1000), (?3, 'i2', ?1, 'not-hex', 1001, 1001),
			(?2, 'acked', ?1, ?4, 999, 999)`, []any{tgt, snd, snd2, hexHash}},
		{"INSERT INTO seqs VALUES(?1, 1002)", []any{tgt}},
		{"INSERT INTO acked VALUES(?1, 999)", []any{tgt}},
		{"INSERT INTO usage VALUES(?1, '', 2, 8), (?1, ?2, 1, 5), (?1, ?3, 1, 3)", []any{tgt, snd, snd2}},
	})
}

// A store written with schema 2 opens as schema 3 with its epoch, queue, seqs, dedup rows
// (tombstones included) and counters as they were, and goes on from there.
func TestUpgradeFromVersion2KeepsQueueAndDedup(t *testing.T) {
	dir := t.TempDir()
	tgt, snd, snd2 := key(1), storetest.Key(2), "sender-key-that-is-not-base64"
	hexHash := storetest.Hash([]byte("abcde"))
	writeV2Store(t, dir, tgt, snd, snd2, hexHash)

	s := openT(t, dir)
	m, err := s.Meta(ctx)
	if err != nil || m.SchemaVersion != SchemaVersion || m.Epoch != "v2-epoch" || m.RelayPubkey != "R" {
		t.Fatalf("meta after upgrade = %+v, %v; want the current schema, epoch v2-epoch, key R", m, err)
	}
	p, err := s.Pull(ctx, tgt, 0, 10, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	want := []relayserver.Item{
		{Target: tgt, Seq: 1000, Kind: relayserver.KindEnvelope, ItemID: "i1", Sender: snd, Wire: []byte("abcde"),
			WireHash: hexHash, AcceptedAt: time.UnixMilli(1000).UTC(), ExpiresAt: time.UnixMilli(9000).UTC()},
		{Target: tgt, Seq: 1001, Kind: relayserver.KindReceipt, ItemID: "i2", Sender: snd2, Wire: []byte("abc"),
			WireHash: "not-hex", AcceptedAt: time.UnixMilli(1001).UTC(), ExpiresAt: time.UnixMilli(9001).UTC()},
	}
	if p.HeadSeq != 1001 || p.AckedThrough != 999 || len(p.Items) != len(want) {
		t.Fatalf("pull after upgrade = %+v, want head 1001, acked 999, %d items", p, len(want))
	}
	for i, it := range p.Items {
		w := want[i]
		if it.Target != w.Target || it.Seq != w.Seq || it.Kind != w.Kind || it.ItemID != w.ItemID ||
			it.Sender != w.Sender || string(it.Wire) != string(w.Wire) || it.WireHash != w.WireHash ||
			!it.AcceptedAt.Equal(w.AcceptedAt) || !it.ExpiresAt.Equal(w.ExpiresAt) {
			t.Errorf("item %d after upgrade = %+v, want %+v", i, it, w)
		}
	}
	checkGoesOn(t, s, tgt, snd, snd2, hexHash)
	if res := storetest.Ack(t, s, tgt, 1001); res.Deleted != 2 {
		t.Errorf("ack of the migrated items deleted %d, want 2", res.Deleted)
	}
}

// Items and dedup rows name keys by id and keep wire hashes as 32 bytes.
func TestItemsStoreKeyIDsAndRawHashes(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir)
	insert(t, s, item(key(1), key(2), "a", "abc", 5))
	s.Close()
	raw := openRaw(t, filepath.Join(dir, DBFile))
	defer raw.Close()
	for _, table := range []string{"items", "dedup"} {
		var target, sender, hash string
		var n int
		err := raw.QueryRowContext(ctx, "SELECT typeof(target), typeof(sender), typeof(wire_hash), length(wire_hash) FROM "+table).
			Scan(&target, &sender, &hash, &n)
		if err != nil || target != "integer" || sender != "integer" || hash != "blob" || n != 32 {
			t.Errorf("%s stores target %s, sender %s, hash %s of %d bytes (%v); want integers and 32 bytes",
				table, target, sender, hash, n, err)
		}
	}
}

// A key row added in a unit that rolls back is gone, and the writer does not keep its id: the
// next item for that key gets a key row of its own and is found by pulls.
func TestKeyAddedInRolledBackUnitIsNotReused(t *testing.T) {
	s := openT(t, t.TempDir())
	boom := errors.New("boom")
	err := s.Update(ctx, func(tx relayserver.Tx) error {
		err := tx.Unit(func(tx relayserver.Tx) error {
			if _, err := tx.InsertItem(item(key(7), key(8), "gone", "g", 5)); err != nil {
				return err
			}
			return boom
		})
		if !errors.Is(err, boom) {
			t.Errorf("unit = %v, want boom", err)
		}
		_, err = tx.InsertItem(item(key(7), key(8), "kept", "k", 5))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	insert(t, s, item(key(7), key(8), "later", "l", 5))
	p, err := s.Pull(ctx, key(7), 0, 10, 1<<20)
	if err != nil || len(p.Items) != 2 || p.Items[0].ItemID != "kept" || p.Items[1].ItemID != "later" ||
		p.Items[0].Sender != key(8) {
		t.Fatalf("pull = %+v, %v; want kept and later from key 8", p, err)
	}
}
