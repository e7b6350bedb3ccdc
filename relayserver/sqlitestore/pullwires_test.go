package sqlitestore

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/relayserver"
)

// PullWires (one statement, packed rows) reads the pages Pull (a read transaction, a column per
// field) reads, items without their wire hash and times, into fresh memory or into a buffer
// reused from page to page: for item ids and kinds that look like the packing (digits, commas,
// NUL bytes, non-ASCII), empty and binary wires, several senders, an acked head, and on a store
// opened afresh (empty key caches: PullWires looks its senders up after the statement).
func TestPullWiresIsPullWithoutHashAndTimes(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir)
	kinds := []relayserver.Kind{relayserver.KindEnvelope, relayserver.KindReceipt, relayserver.KindExpired, "3,x", ""}
	ids := []string{"id-%d", "%d,", "12,34,%d", "nul\x00%d\x00", "ümlaut-%d-✓", ",%d,,", "%d"}
	if err := s.Update(ctx, func(tx relayserver.Tx) error {
		for i := range 40 {
			wire := fmt.Sprintf("wire %0*d", 1+i*7, i)
			switch i % 9 {
			case 4:
				wire = ""
			case 5:
				wire = "\x00\xff,1,\x00" + strings.Repeat("\xfe", i)
			}
			it := item(key(1), key(2+i%3), fmt.Sprintf(ids[i%len(ids)], i), wire, int64(1000+i))
			it.Kind = kinds[i%len(kinds)]
			if _, err := tx.InsertItem(it); err != nil {
				return err
			}
		}
		_, err := tx.Ack(key(1), 1003)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = openT(t, dir)
	var buf relayserver.PullBuf
	for i, c := range []struct {
		target          string
		after           int64
		limit           int
		maxBytes        int64
		wantN           int
		wantMore, wantA bool
	}{
		{key(1), 0, 500, 1 << 20, 36, false, true},
		{key(1), 0, 10, 1 << 20, 10, true, true},
		{key(1), 1010, 500, 1 << 20, 29, false, true},
		{key(1), 1039, 500, 1 << 20, 0, false, false},
		{key(1), 0, 500, 200, 0, true, true}, // cut by bytes (the first item always goes)
		{key(1), 0, 500, 1, 1, true, true},
		{key(1), 0, 1, 1 << 20, 1, true, true},
		{key(9), 0, 500, 1 << 20, 0, false, false},
	} {
		wires, err := s.PullWires(ctx, c.target, c.after, c.limit, c.maxBytes, map[bool]*relayserver.PullBuf{true: &buf}[i%2 == 0])
		if err != nil {
			t.Fatal(err)
		}
		full, err := s.Pull(ctx, c.target, c.after, c.limit, c.maxBytes)
		if err != nil {
			t.Fatal(err)
		}
		if full.More != c.wantMore || (c.wantN > 0 && len(full.Items) != c.wantN) || (c.wantA && len(full.Items) == 0) ||
			(c.target == key(1) && (full.HeadSeq != 1039 || full.AckedThrough != 1003)) {
			t.Errorf("Pull(%d, %d, %d) = %d items, more %v, head %+v", c.after, c.limit, c.maxBytes, len(full.Items), full.More, full.Head)
		}
		for i := range full.Items {
			it := &full.Items[i]
			if it.WireHash == "" || it.AcceptedAt.IsZero() || it.ExpiresAt.IsZero() {
				t.Fatalf("Pull item %+v lacks its hash or times", it)
			}
			it.WireHash, it.AcceptedAt, it.ExpiresAt = "", time.Time{}, time.Time{}
		}
		for _, p := range []relayserver.Page{full, wires} {
			for i := range p.Items {
				if len(p.Items[i].Wire) == 0 {
					p.Items[i].Wire = nil // an empty wire may come as nil or as empty: both are ""
				}
			}
		}
		if !reflect.DeepEqual(full, wires) {
			t.Errorf("after %d limit %d max %d:\nPull      %+v\nPullWires %+v", c.after, c.limit, c.maxBytes, full, wires)
		}
	}
}

// A packed item row that does not parse fails the pull rather than misreading it.
func TestUnpackItemRefusesMalformedRows(t *testing.T) {
	good, err := unpackItem(int64(7), int64(2), "3,2,abcidwire")
	if err != nil || good != (packedItem{seq: 7, sender: 2, kind: "abc", itemID: "id", wire: "wire"}) {
		t.Fatalf("unpackItem = %+v, %v", good, err)
	}
	for _, c := range [][3]any{
		{int64(7), int64(2), "3,2,ab"},         // shorter than its lengths
		{int64(7), int64(2), "3;2,abcid"},      // no comma
		{int64(7), int64(2), ",2,abcid"},       // no number
		{int64(7), int64(2), "-1,2,abcid"},     // negative
		{int64(7), int64(2), "99999999999,0,"}, // absurd
		{nil, int64(2), "0,0,"},                // a second head row
		{int64(7), "2", "0,0,"},                // sender not an integer
		{int64(7), int64(2), []byte("0,0,")},   // not text
	} {
		if it, err := unpackItem(c[0], c[1], c[2]); err == nil {
			t.Errorf("unpackItem(%v) = %+v, want an error", c, it)
		}
	}
}
