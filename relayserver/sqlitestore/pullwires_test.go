package sqlitestore

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/relayserver"
)

// PullWires reads the pages Pull reads, items without their wire hash and times, into fresh
// memory or into a buffer reused from page to page.
func TestPullWiresIsPullWithoutHashAndTimes(t *testing.T) {
	s := openT(t, t.TempDir())
	kinds := []relayserver.Kind{relayserver.KindEnvelope, relayserver.KindReceipt, relayserver.KindExpired}
	if err := s.Update(ctx, func(tx relayserver.Tx) error {
		for i := range 40 {
			it := item(key(1), key(2+i%3), fmt.Sprint("id-", i), fmt.Sprintf("wire %0*d", 1+i*7, i), int64(1000+i))
			it.Kind = kinds[i%3]
			if _, err := tx.InsertItem(it); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var buf relayserver.PullBuf
	for i, c := range []struct {
		target          string
		after           int64
		limit           int
		maxBytes        int64
		wantN           int
		wantMore, wantA bool
	}{
		{key(1), 0, 500, 1 << 20, 40, false, true},
		{key(1), 0, 10, 1 << 20, 10, true, true},
		{key(1), 1010, 500, 1 << 20, 29, false, true},
		{key(1), 0, 500, 200, 0, true, true}, // cut by bytes (the first item always goes)
		{key(1), 0, 500, 1, 1, true, true},
		{key(9), 0, 500, 1 << 20, 0, false, false},
	} {
		full, err := s.Pull(ctx, c.target, c.after, c.limit, c.maxBytes)
		if err != nil {
			t.Fatal(err)
		}
		into := &buf
		if i%2 == 1 {
			into = nil
		}
		wires, err := s.PullWires(ctx, c.target, c.after, c.limit, c.maxBytes, into)
		if err != nil {
			t.Fatal(err)
		}
		if full.More != c.wantMore || (c.wantN > 0 && len(full.Items) != c.wantN) || (c.wantA && len(full.Items) == 0) {
			t.Errorf("Pull(%d, %d, %d) = %d items, more %v", c.after, c.limit, c.maxBytes, len(full.Items), full.More)
		}
		for i := range full.Items {
			it := &full.Items[i]
			if it.WireHash == "" || it.AcceptedAt.IsZero() || it.ExpiresAt.IsZero() {
				t.Fatalf("Pull item %+v lacks its hash or times", it)
			}
			it.WireHash, it.AcceptedAt, it.ExpiresAt = "", time.Time{}, time.Time{}
		}
		if !reflect.DeepEqual(full, wires) {
			t.Errorf("after %d limit %d max %d:\nPull      %+v\nPullWires %+v", c.after, c.limit, c.maxBytes, full, wires)
		}
	}
}
