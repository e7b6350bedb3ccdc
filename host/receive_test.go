package host

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/host/mailstore"
	"github.com/agentmbx/agentmbx/internal/failpoint"
	"github.com/agentmbx/agentmbx/internal/testkit"
	"github.com/agentmbx/agentmbx/mbx"
)

func TestRetiredKeys(t *testing.T) {
	clock := newClock()
	a, b := newTestHost(t, "alpha", clock), newTestHost(t, "beta", clock)
	pairAll(t, a, b)

	// beta rotated its enc key; alpha still seals to the old one, which beta keeps as retired.
	oldEnc := b.enc
	newEnc, _ := mbx.GenerateEncKey(testkit.Rand(42))
	b.enc, b.retired = newEnc, []mbx.EncKey{oldEnc}
	w1 := sealedFor(t, a, "alice", []string{"bob@beta"}, &testHost{Host: &Host{enc: oldEnc}})
	if st, err := b.receiveEnvelope(context.Background(), "alpha", w1, true); err != nil || st != mbx.StatusAccepted {
		t.Fatalf("envelope sealed to a retired enc key: %q, %v", st, err)
	}

	// alpha rotated its host key; beta pins the new one with the old as retired. An envelope
	// signed before the rotation still verifies; the hop is signed with the new key.
	oldKey := a.key
	newKey, _ := mbx.GenerateSigningKey(testkit.Rand(43))
	rec := a.record()
	rec.HostPubkey, rec.RetiredKeys = newKey.PublicKey(), []string{oldKey.PublicKey()}
	if err := b.PinPeer(rec); err != nil {
		t.Fatal(err)
	}
	w2 := sealedFor(t, a, "alice", []string{"bob@beta"}, b) // signed by oldKey
	status, data := postHop(t, b, newKey, "alpha", mbx.PathLANEnvelopes, envelopesBody(w2), clock.Now())
	if status != 200 || !strings.Contains(string(data), `"accepted"`) {
		t.Fatalf("envelope signed by a retired key: %d %s", status, data)
	}
	// A hop signed by the retired key is refused: hops use the current key only.
	w3 := sealedFor(t, a, "alice", []string{"bob@beta"}, b)
	if status, _ := postHop(t, b, oldKey, "alpha", mbx.PathLANEnvelopes, envelopesBody(w3), clock.Now()); status != 401 {
		t.Fatalf("hop signed by a retired key: %d, want 401", status)
	}
	if got := b.inbox("bob", true); len(got) != 2 {
		t.Fatalf("bob has %d messages, want 2", len(got))
	}
}

func TestRetiredEncKeyFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "h")
	if err := Init(dir, InitOptions{Host: "alpha", Rand: testkit.Rand(5)}); err != nil {
		t.Fatal(err)
	}
	old, _ := mbx.GenerateEncKey(testkit.Rand(6))
	raw, _ := json.Marshal([]mbx.KeyFile{old.File()})
	if err := os.WriteFile(filepath.Join(dir, RetiredEnc), raw, 0o600); err != nil {
		t.Fatal(err)
	}
	h, err := Open(dir, &Options{Logger: testLoggerB()})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if len(h.retired) != 1 || h.retired[0].PublicKey() != old.PublicKey() {
		t.Fatalf("retired enc keys = %v", h.retired)
	}
	h.Close()
	os.WriteFile(filepath.Join(dir, RetiredEnc), []byte("{"), 0o600)
	if _, err := Open(dir, nil); err == nil {
		t.Fatal("Open with a corrupt enc.retired succeeded")
	}
}

func TestDedupOutlivesSeenRetention(t *testing.T) {
	clock := newClock()
	a, b := newTestHost(t, "alpha", clock), newTestHost(t, "beta", clock)
	pairAll(t, a, b)
	ctx := context.Background()
	w := sealedFor(t, a, "alice", []string{"bob@beta"}, b)
	if st, _ := b.receiveEnvelope(ctx, "alpha", w, true); st != mbx.StatusAccepted {
		t.Fatalf("first = %q", st)
	}
	clock.Advance(SeenRetention - time.Hour)
	b.sweep(ctx)
	if st, _ := b.receiveEnvelope(ctx, "alpha", w, true); st != mbx.StatusDuplicate {
		t.Fatalf("repeat inside the retention = %q, want duplicate", st)
	}
	if n := b.counts()["seen"]; n != 1 {
		t.Fatalf("seen has %d ids, want 1", n)
	}
	clock.Advance(2 * time.Hour)
	b.sweep(ctx)
	if n := b.counts()["seen"]; n != 0 {
		t.Fatalf("seen has %d ids after the retention, want 0 (pruned)", n)
	}
	// The message itself is still in the mailbox, so a repeat is still a duplicate.
	if st, _ := b.receiveEnvelope(ctx, "alpha", w, true); st != mbx.StatusDuplicate {
		t.Fatalf("repeat after pruning = %q, want duplicate", st)
	}
	if got := b.inbox("bob", true); len(got) != 1 {
		t.Fatalf("bob has %d copies", len(got))
	}
	// Another host reusing the id is refused.
	c := newTestHost(t, "gamma", clock)
	pairAll(t, b, c)
	env, _ := mbx.ParseEnvelope(w)
	forged, _ := mbx.Build(mbx.Draft{From: "carl@gamma", To: []string{"bob@beta"}, Subject: "same id", Body: "x"}, clock.Now(), fixedID(env.ID))
	_, fw, _ := forged.Seal(c.rand, b.enc.PublicKey(), "gamma", c.key)
	if st, _ := b.receiveEnvelope(ctx, "gamma", fw, true); st != "rejected:"+ReasonIDConflict {
		t.Fatalf("id reused by another host = %q", st)
	}
	if st, _ := b.receiveEnvelope(ctx, "nobody", fw, true); st != "rejected:"+ReasonUnpaired {
		t.Fatalf("unpaired sender = %q", st)
	}
}

type fixedID string

func (f fixedID) New(time.Time) string { return string(f) }

// A repeat of a received envelope is a duplicate and leaves the copy as it was (delivered once,
// read stays read); with the failpoint that turns the dedup off, the same repeat is stored again
// and shows as a second delivery of a copy gone back to unread: what the oracles of the
// simulation, the soak and the demo count.
func TestRepeatCountsOneDeliveryUnlessDedupIsSkipped(t *testing.T) {
	clock := newClock()
	a, b := newTestHost(t, "alpha", clock), newTestHost(t, "beta", clock)
	pairAll(t, a, b)
	ctx := context.Background()
	w := sealedFor(t, a, "alice", []string{"bob@beta"}, b)
	if st, err := b.receiveEnvelope(ctx, "alpha", w, true); st != mbx.StatusAccepted {
		t.Fatalf("first = %q, %v", st, err)
	}
	env, _ := mbx.ParseEnvelope(w)
	if _, err := b.Service().Read(ctx, api.ReadRequest{Agent: "bob", ID: env.ID}); err != nil {
		t.Fatal(err)
	}
	if st, _ := b.receiveEnvelope(ctx, "alpha", w, true); st != mbx.StatusDuplicate {
		t.Fatalf("repeat = %q, want duplicate", st)
	}
	if got := b.inbox("bob", true); len(got) != 1 || got[0].Deliveries != 1 || got[0].State != "read" {
		t.Fatalf("after a repeat: %+v, want one copy delivered once, read", got)
	}
	restore := failpoint.Enable(mailstore.FailSkipDedup, failpoint.Error)
	st, err := b.receiveEnvelope(ctx, "alpha", w, true)
	restore()
	if st != mbx.StatusAccepted {
		t.Fatalf("repeat past the dedup = %q, %v; want accepted", st, err)
	}
	if got := b.inbox("bob", true); len(got) != 1 || got[0].Deliveries != 2 || got[0].State != "notified" {
		t.Fatalf("after a repeat past the dedup: %+v, want one copy delivered twice, back to unread", got)
	}
}
