package relayserver_test

import (
	"strings"
	"testing"

	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/relayserver"
)

// Finding 2: the relay-wide item limit refuses pushes retryably (quota:relay), a retry of an
// accepted item still gets its accept, and acks make room again.
func TestRelayWideCapacity(t *testing.T) {
	t.Parallel()
	r, a, b, g := setup(t, func(o *relayserver.Options) { o.MaxRelayItems = 3 })
	ids := []string{"01KKNTQ69NA67N0QBPXKXFN511", "01KKNTQ69NA67N0QBPXKXFN512", "01KKNTQ69NA67N0QBPXKXFN513"}
	if st := statuses(r.push(a, envItem(ids[0], b), envItem(ids[1], b))); st[0] != "accepted" || st[1] != "accepted" {
		t.Fatalf("pushes under the limit = %v", st)
	}
	// Two targets of one item do not fit in the one item left: the whole item is refused.
	if st := statuses(r.push(a, envItem(ids[2], b, g))); st[0] != "rejected:"+relayserver.RejectRelayQuota {
		t.Fatalf("item over the relay-wide limit = %v, want rejected:quota:relay", st)
	}
	if st := statuses(r.push(a, envItem(ids[2], g))); st[0] != "accepted" {
		t.Fatalf("item that fits = %v", st)
	}
	if st := statuses(r.push(g, envItem("01KKNTQ69NA67N0QBPXKXFN514", b))); st[0] != "rejected:quota:relay" {
		t.Fatalf("push on a full relay = %v", st)
	}
	if st := statuses(r.push(a, envItem(ids[0], b))); st[0] != "duplicate" {
		t.Fatalf("retry of an accepted item on a full relay = %v, want duplicate", st)
	}
	head := r.pull(b, 0).HeadSeq
	if code, out := r.call(&b, "POST", "/v2/relay/ack", mustJSON(t, mbx.AckRequest{Epoch: r.srv.Epoch(), Through: head})); code != 200 {
		t.Fatalf("ack on a full relay = %d %s", code, out)
	}
	if st := statuses(r.push(g, envItem("01KKNTQ69NA67N0QBPXKXFN514", b))); st[0] != "accepted" {
		t.Fatalf("push after the ack = %v", st)
	}
	// Enrolment still works on a full relay.
	r.enrol(newHost(t, "delta", 4))
}

// The byte limit counts every target's wire bytes and its dedup row, and survives a restart (the
// totals are read from the store).
func TestRelayWideByteLimitAcrossRestart(t *testing.T) {
	t.Parallel()
	r, a, b, _ := setup(t, func(o *relayserver.Options) {
		o.MaxRelayBytes = 2 * (int64(len(envWire("01KKNTQ69NA67N0QBPXKXFN521", ""))) + relayserver.DedupRowBytes)
	})
	for i, want := range []string{"accepted", "accepted", "rejected:quota:relay"} {
		id := "01KKNTQ69NA67N0QBPXKXFN52" + string(rune('1'+i))
		if st := statuses(r.push(a, envItem(id, b))); st[0] != want {
			t.Fatalf("push %d = %v, want %s", i, st, want)
		}
	}
	r.restart()
	if st := statuses(r.push(a, envItem("01KKNTQ69NA67N0QBPXKXFN529", b))); st[0] != "rejected:quota:relay" {
		t.Fatalf("push after a restart = %v, want rejected:quota:relay", st)
	}
}

// The v1 push endpoint holds the same relay-wide limit.
func TestRelayWideCapacityV1(t *testing.T) {
	t.Parallel()
	r, a, _, _ := setup(t, func(o *relayserver.Options) { o.MaxRelayItems = 1 })
	if code, res := r.v1Push(a, v1Env("01JQV1000000000000000000D1", "bob@beta")); code != 200 || res.Stored != 1 {
		t.Fatalf("first v1 push = %d %+v", code, res)
	}
	code, res := r.v1Push(a, v1Env("01JQV1000000000000000000D2", "bob@beta"))
	if code != 413 || !strings.Contains(errText(res), relayserver.RejectRelayQuota) {
		t.Fatalf("v1 push on a full relay = %d %+v, want %s", code, res, relayserver.RejectRelayQuota)
	}
	if code, res := r.v1Push(a, v1Env("01JQV1000000000000000000D1", "bob@beta")); code != 200 || res.Stored != 1 {
		t.Fatalf("v1 retry of the stored envelope on a full relay = %d %+v", code, res)
	}
}
