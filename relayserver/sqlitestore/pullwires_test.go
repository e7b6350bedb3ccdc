package sqlitestore

import (
	"database/sql/driver"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
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

// A packed head or item row that does not parse fails the pull rather than misreading it.
func TestUnpackRefusesMalformedRows(t *testing.T) {
	good, err := unpackItem("-7,2,3,2,abcidwire")
	if err != nil || good != (packedItem{seq: -7, sender: 2, kind: "abc", itemID: "id", wire: "wire"}) {
		t.Fatalf("unpackItem = %+v, %v", good, err)
	}
	edge, err := unpackItem("9223372036854775807,-9223372036854775808,0,0,")
	if err != nil || edge != (packedItem{seq: math.MaxInt64, sender: math.MinInt64}) {
		t.Fatalf("unpackItem = %+v, %v", edge, err)
	}
	if h, a, err := unpackHead("12,9,"); h != 12 || a != 9 || err != nil {
		t.Fatalf("unpackHead = %d, %d, %v", h, a, err)
	}
	for _, row := range []driver.Value{
		"7,2,3,2,ab",                  // shorter than its lengths
		"7,2,3;2,abcid",               // no comma
		"7,2,,2,abcid",                // no number
		"7,2,-1,2,abcid",              // negative length
		"7,2,0,-1,abcid",              // negative length
		"7,2,99999999999999999999,0,", // out of range
		"9223372036854775808,2,0,0,",  // out of range
		"7,-,0,0,",                    // a sign alone
		"7,2,0,",                      // too few numbers
		"12,9,",                       // a second head row
		[]byte("7,2,0,0,"),            // not text
		nil,
	} {
		if it, err := unpackItem(row); err == nil {
			t.Errorf("unpackItem(%q) = %+v, want an error", row, it)
		}
	}
	for _, row := range []driver.Value{"12,9", "12,9,x", "12,", "7,2,0,0,", int64(12), nil} {
		if h, a, err := unpackHead(row); err == nil {
			t.Errorf("unpackHead(%q) = %d, %d, want an error", row, h, a)
		}
	}
}

// Close finalizes the pull statement kept on each read connection before the pool closes them:
// a connection with a statement left open would stay open, and the store's WAL with it.
func TestCloseAfterPullsLeavesNoWAL(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(ctx, dir, &Options{LockWait: 200 * time.Millisecond, Readers: 2})
	if err != nil {
		t.Fatal(err)
	}
	insert(t, s, item(key(1), key(2), "a", "w", 1000))
	var wg sync.WaitGroup
	for range 8 { // concurrent pulls: more than one read connection gets the statement
		wg.Go(func() {
			if _, err := s.PullWires(ctx, key(1), 0, 10, 1<<20, nil); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for _, suffix := range []string{"-wal", "-shm"} {
		if _, err := os.Stat(filepath.Join(dir, DBFile+suffix)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s%s after Close: %v, want it gone (a connection stayed open)", DBFile, suffix, err)
		}
	}
}
