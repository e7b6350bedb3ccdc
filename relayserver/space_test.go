package relayserver_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/outbox"
	"github.com/agentmbx/agentmbx/relayserver"
)

// pushAck pushes n envelopes from h to itself, tagged, acks them, and returns their statuses.
func (r *relay) pushAck(h host, tag string, n int) []string {
	r.t.Helper()
	items := make([]mbx.PushItem, n)
	for i := range items {
		items[i] = envItem(fmt.Sprintf("%s-%03d", tag, i), h)
	}
	st := statuses(r.push(h, items...))
	if head := r.pull(h, 0).HeadSeq; head > 0 {
		r.ack(h, head)
	}
	return st
}

func count(st []string, want string) int {
	n := 0
	for _, s := range st {
		if s == want {
			n++
		}
	}
	return n
}

// Finding 2: a sender's dedup rows are capped. Past the cap its pushes are refused retryably (a
// retry of an accepted item is still a duplicate); the sweep prunes its tombstones past the honest
// retry horizon, which makes room, while a sender under the cap keeps its rows for the full
// horizon.
func TestSenderDedupCap(t *testing.T) {
	t.Parallel()
	r, a, b, _ := setup(t, func(o *relayserver.Options) { o.MaxSenderDedup = 5 })
	st := r.pushAck(a, "a", 7)
	if count(st, "accepted") != 5 || count(st, "rejected:"+relayserver.RejectSenderDedup) != 2 {
		t.Fatalf("7 pushes with a cap of 5 dedup rows = %v", st)
	}
	if st := statuses(r.push(a, envItem("a-000", a))); st[0] != "duplicate" {
		t.Fatalf("retry of an acked item at the cap = %v, want duplicate", st)
	}
	// beta, an honest sender under the cap, pushes once.
	if st := statuses(r.push(b, envItem("b-000", a))); st[0] != "accepted" {
		t.Fatalf("another sender's push = %v", st)
	}
	r.ack(a, r.pull(a, 0).HeadSeq) // beta's row is a tombstone too
	// Before the honest horizon the sweep prunes nothing, and the cap holds.
	r.clock.Advance(relayserver.HonestRetryHorizon(14*day) - time.Minute)
	if rep := r.sweep(); rep.DedupPruned != 0 {
		t.Fatalf("sweep before the honest horizon pruned %d rows", rep.DedupPruned)
	}
	if st := statuses(r.push(a, envItem("a-100", a))); st[0] != "rejected:"+relayserver.RejectSenderDedup {
		t.Fatalf("push at the cap = %v", st)
	}
	// Past it, alpha's tombstones go (it is at its cap); beta's row stays (under its cap).
	r.clock.Advance(2 * time.Minute)
	if rep := r.sweep(); rep.DedupPruned != 5 {
		t.Fatalf("sweep past the honest horizon pruned %d rows, want alpha's 5", rep.DedupPruned)
	}
	if st := statuses(r.push(a, envItem("a-100", a))); st[0] != "accepted" {
		t.Fatalf("push after the sweep = %v", st)
	}
	if st := statuses(r.push(b, envItem("b-000", a))); st[0] != "duplicate" {
		t.Fatalf("beta's retry past the honest horizon = %v, want duplicate (its row kept)", st)
	}
}

// A relay whose relay-wide byte limit is filled with tombstones (each key under its own cap)
// refuses pushes with quota:relay, and gets back below the limit by itself: the sweep prunes
// everyone's tombstones past the honest retry horizon while the relay is full.
func TestRelayFullOfTombstonesRecovers(t *testing.T) {
	t.Parallel()
	wire := int64(len(envWire("f0-000", "")))
	r, a, b, _ := setup(t, func(o *relayserver.Options) {
		o.MaxSenderDedup = 10
		o.MaxRelayBytes = 30*relayserver.DedupRowBytes + 2*wire
	})
	var flood []host
	for i := range 4 {
		h := newHost(t, fmt.Sprintf("flood%d", i), uint64(100+i))
		r.enrol(h)
		flood = append(flood, h)
	}
	accepted := 0
	for i, h := range flood {
		accepted += count(r.pushAck(h, fmt.Sprintf("f%d", i), 10), "accepted")
	}
	if accepted < 28 || accepted > 32 {
		t.Fatalf("flood accepted %d items, want about 30 (the relay-wide limit)", accepted)
	}
	if st := statuses(r.push(a, envItem("honest-1", b))); st[0] != "rejected:"+relayserver.RejectRelayQuota {
		t.Fatalf("honest push on a relay full of tombstones = %v, want quota:relay", st)
	}
	r.clock.Advance(relayserver.HonestRetryHorizon(14*day) + time.Minute)
	if rep := r.sweep(); rep.DedupPruned < int64(accepted) {
		t.Fatalf("sweep on a full relay pruned %d rows, want the %d tombstones", rep.DedupPruned, accepted)
	}
	if st := statuses(r.push(a, envItem("honest-1", b))); st[0] != "accepted" {
		t.Fatalf("honest push after the sweep = %v", st)
	}
}

// The operator reclaims what a denied key holds: its queue, what it queued for others and its
// dedup rows; the usage report shows the space before and after.
func TestReclaimDeniedKey(t *testing.T) {
	t.Parallel()
	r, a, b, m := setup(t, nil)
	r.pushAck(m, "m", 50)
	r.push(m, envItem("m-queued", m), envItem("m-spam", b))
	r.push(a, envItem("a-for-m", m))
	rep, err := r.store.Usage(bg, 1)
	if err != nil || len(rep.Keys) != 1 || rep.Keys[0].Pubkey != m.pub() || rep.Keys[0].DedupRows != 52 {
		t.Fatalf("usage before = %+v, %v; want gamma first with 52 dedup rows", rep, err)
	}
	// No entry: nothing to reclaim.
	if _, err := relayserver.RequestReclaim(bg, r.store, relayserver.DenyHost, mbx.Fingerprint(m.pub()), r.clock.Now()); !errors.Is(err, relayserver.ErrNotFound) {
		t.Fatalf("reclaim without a deny entry = %v, want ErrNotFound", err)
	}
	r.deny(relayserver.DenyHost, mbx.Fingerprint(m.pub()), 0)
	r.reloadDeny()
	if _, err := relayserver.RequestReclaim(bg, r.store, relayserver.DenyHost, mbx.Fingerprint(m.pub()), r.clock.Now()); err != nil {
		t.Fatal(err)
	}
	r.reloadDeny()
	l, err := r.store.DenyList(bg)
	if err != nil || len(l) != 1 || l[0].ReclaimPending() ||
		l[0].Reclaimed != (relayserver.ReclaimResult{Keys: 1, Items: 3, Bytes: l[0].Reclaimed.Bytes, DedupRows: 52}) {
		t.Fatalf("deny entry after the reclaim = %+v, %v; want 3 items and 52 dedup rows reclaimed", l, err)
	}
	after, err := r.store.Usage(bg, 10)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range after.Keys {
		if k.Pubkey == m.pub() {
			t.Errorf("usage after the reclaim still shows gamma: %+v", k)
		}
	}
	if after.DedupRows != 1 || after.Queued.Items != 0 {
		t.Errorf("usage after the reclaim = %+v, want alpha's one dedup row and nothing queued", after)
	}
	// Applying again does nothing: the entry's reclaim is done.
	if _, _, ok, err := relayserver.ApplyReclaim(bg, r.store, l[0], r.clock.Now()); err != nil || ok {
		t.Fatalf("second ApplyReclaim = %v, %v; want nothing to do", ok, err)
	}
	// beta's mail is untouched.
	if p := r.pull(b, 0); len(p.Items) != 0 {
		t.Errorf("beta's queue = %v, want the spam reclaimed", ids(p))
	}
}

// The honest retry horizon covers a host's own deadlines (outbox defaults): a pending row's
// and a relay-accepted row's, whichever is later.
func TestHonestRetryHorizonCoversHostDeadlines(t *testing.T) {
	for _, days := range []int{1, 3, 14, 30} {
		ret := time.Duration(days) * day
		h := relayserver.HonestRetryHorizon(ret)
		if h <= outbox.DefaultLANDeadline || h <= ret+outbox.DefaultGrace {
			t.Errorf("retention %d days: honest horizon %v does not cover the pending deadline %v or the accepted one %v",
				days, h, outbox.DefaultLANDeadline, ret+outbox.DefaultGrace)
		}
		if full := 2*ret + relayserver.DedupGrace; h > full {
			t.Errorf("retention %d days: honest horizon %v past the full horizon %v", days, h, full)
		}
	}
}
