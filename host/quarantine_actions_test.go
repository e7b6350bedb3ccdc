package host

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/quarantine"
)

// TestQuarantineReleaseAndPurge: the owner's release processes one quarantined item again: while
// its cause holds it is refused again and stays (with the new reason); once fixed it is taken
// and delivered. Purge deletes only the items held longer than it is told, and refuses a
// too-short age. Ids are taken by unique prefix.
func TestQuarantineReleaseAndPurge(t *testing.T) {
	_, b, r := relayPair(t, mbx.Limits{})
	ctx := context.Background()
	c := newTestHost(t, "gamma", b.clock)
	if err := c.PinPeer(b.noLAN()); err != nil {
		t.Fatal(err)
	}
	if err := b.PinPeer(c.noLAN()); err != nil {
		t.Fatal(err)
	}
	c.useRelay(r)
	b.keep()
	msg := c.send("carl", []string{"bob@beta"}, "held", "kept in quarantine a while")
	c.passOnce()
	if err := b.RemovePeer(ctx, "gamma"); err != nil {
		t.Fatal(err)
	}
	b.pull()
	items, err := b.Relay().RelayQuarantine(ctx)
	if err != nil || len(items) != 1 || items[0].ItemID != msg.ID || len(items[0].ID) != 64 {
		t.Fatalf("quarantine = %+v, %v", items, err)
	}
	id := items[0].ID
	// Still unpaired: refused again, kept.
	res, err := b.Relay().ReleaseQuarantined(ctx, api.QuarantineReleaseRequest{ID: strings.ToUpper(id[:10])})
	if err != nil || res.Accepted || res.Item.ID != id || res.Item.Cause != quarantine.CauseUnpaired.String() {
		t.Fatalf("release while unpaired = %+v, %v", res, err)
	}
	if n := b.copies("bob", msg.ID); n != 0 {
		t.Fatalf("a refused release delivered %d copies", n)
	}
	// The item is held for another cause that pairing does not clear (as if a bug had refused
	// it); gamma is paired again, the item stays until the owner releases it.
	err = b.quar.Update(ctx, func(q *quarantine.Tx) error {
		e, err := q.ReleaseID(id)
		if err != nil {
			return err
		}
		e.Cause, e.Reason = quarantine.CauseRefused, "refused by a since-fixed check"
		_, _, err = q.Put(e)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.PinPeer(c.noLAN()); err != nil {
		t.Fatal(err)
	}
	if n := b.copies("bob", msg.ID); n != 0 {
		t.Fatal("pairing released an item held for another cause")
	}
	res, err = b.Relay().ReleaseQuarantined(ctx, api.QuarantineReleaseRequest{ID: id[:8]})
	if err != nil || !res.Accepted || res.Item.ItemID != msg.ID {
		t.Fatalf("release once fixed = %+v, %v", res, err)
	}
	if n := b.copies("bob", msg.ID); n != 1 {
		t.Fatalf("the released message has %d copies, want 1", n)
	}
	if items, _ := b.Relay().RelayQuarantine(ctx); len(items) != 0 {
		t.Fatalf("quarantine after the release = %+v", items)
	}
	// Releasing it again: not found, nothing changes.
	if _, err := b.Relay().ReleaseQuarantined(ctx, api.QuarantineReleaseRequest{ID: id}); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("second release = %v, want not found", err)
	}
	for _, bad := range []string{"", "abc", "zzzzzzzzzz"} {
		if _, err := b.Relay().ReleaseQuarantined(ctx, api.QuarantineReleaseRequest{ID: bad}); !errors.Is(err, api.ErrInvalid) {
			t.Errorf("release %q = %v, want invalid", bad, err)
		}
	}

	// Purge: two items, one held 2 h, one just now; --older-than 1h deletes only the first.
	put := func(itemID string) {
		t.Helper()
		err := b.quar.Update(ctx, func(q *quarantine.Tx) error {
			_, _, err := q.Put(quarantine.Entry{Relay: r.url, Epoch: r.epoch(), Seq: 1, ItemID: itemID, Kind: "envelope",
				Sender: c.key.PublicKey(), Cause: quarantine.CauseMalformed, Reason: "test", Wire: []byte(itemID)})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	put("old-item")
	b.clock.Advance(2 * time.Hour)
	put("new-item")
	if _, err := b.Relay().PurgeQuarantined(ctx, api.QuarantinePurgeRequest{OlderThan: time.Second}); !errors.Is(err, api.ErrInvalid) {
		t.Fatalf("purge of 1s = %v, want invalid", err)
	}
	p, err := b.Relay().PurgeQuarantined(ctx, api.QuarantinePurgeRequest{OlderThan: time.Hour})
	if err != nil || len(p.Purged) != 1 || p.Purged[0].ItemID != "old-item" {
		t.Fatalf("purge = %+v, %v", p, err)
	}
	if items, _ := b.Relay().RelayQuarantine(ctx); len(items) != 1 || items[0].ItemID != "new-item" {
		t.Fatalf("quarantine after the purge = %+v", items)
	}
}
