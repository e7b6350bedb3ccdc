package relayserver_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/relayserver"
)

// Issue 25, finding 5: each rotated key started with a fresh push bucket, so a key that rotated
// as fast as the rotate route allowed pushed many times the per-key rate. The new key now pushes
// in its predecessor's bucket: along a chain of rotations the pushes taken stay within one key's
// rate, and an honest host is served throughout.
func TestRotationInheritsPushRate(t *testing.T) {
	t.Parallel()
	const perMinute = 4
	r := newRelay(t, func(o *relayserver.Options) { o.PushesPerMinute = perMinute })
	target, honest := newHost(t, "target", 40), newHost(t, "honest", 41)
	r.enrol(target)
	r.enrol(honest)
	cur := newHost(t, "rot", 42)
	r.enrol(cur)
	accepted, n := 0, 0
	push := func(h host) string {
		t.Helper()
		n++
		res := r.push(h, envItem(fmt.Sprintf("01KKNTQ69NA67N0QBPXKXF%04d", n), target))
		return res.Results[0].Status
	}
	drain := func(h host) {
		t.Helper()
		for range perMinute + 2 {
			if st := push(h); st == mbx.StatusAccepted {
				accepted++
			} else if st != mbx.StatusRejectedPrefix+relayserver.RejectRate {
				t.Fatalf("push = %q, want accepted or rejected:rate", st)
			}
		}
	}
	drain(cur)
	for i := range 10 {
		next := newHost(t, "rot", uint64(50+i))
		r.rotate(cur, next)
		cur = next
		drain(cur)
		if i%3 != 0 {
			continue // the honest host pushes within its own rate: 4 times in all
		}
		if st := push(honest); st != mbx.StatusAccepted {
			t.Fatalf("the honest host's push after rotation %d = %q, want accepted", i+1, st)
		}
	}
	if accepted != perMinute {
		t.Fatalf("a key rotated 10 times pushed %d items at one instant, want the per-key %d", accepted, perMinute)
	}
	// The bucket refills at the per-key rate, for the latest key.
	r.clock.Advance(time.Minute / perMinute)
	if st := push(cur); st != mbx.StatusAccepted {
		t.Fatalf("the rotated key a quarter minute later = %q, want accepted", st)
	}
	if st := push(cur); st != mbx.StatusRejectedPrefix+relayserver.RejectRate {
		t.Fatalf("its second push then = %q, want rejected:rate", st)
	}
}

// A rotation to a key the relay does not know counts as a new key of the day for the calling
// address, as an enrolment does: rotating does not escape the new-enrolments limit. A rotation
// to an enrolled key, other addresses, and the next day are not affected.
func TestRotationCountsAgainstNewEnrolmentsPerDay(t *testing.T) {
	t.Parallel()
	r := newRelay(t, func(o *relayserver.Options) {
		o.TrustProxy = relayserver.TrustXFF
		o.NewEnrolmentsPerDay = 2
	})
	const addr = "203.0.113.9"
	cur := newHost(t, "rot", 60)
	if code := r.enrolFrom(t, addr, cur); code != 200 {
		t.Fatalf("enrol = %d", code)
	}
	next := newHost(t, "rot", 61)
	if code, body := r.postFrom(t, addr, "/v2/relay/rotate", r.rotationBody(cur, next)); code != 200 {
		t.Fatalf("first rotation (the second new key) = %d %s", code, body)
	}
	cur, next = next, newHost(t, "rot", 62)
	code, body := r.postFrom(t, addr, "/v2/relay/rotate", r.rotationBody(cur, next))
	wantStatus(t, "a rotation to a third new key of the day", code, body, http.StatusTooManyRequests, "new host keys")
	if e, err := r.store.Enrolment(bg, cur.pub()); err != nil || !e.Live() {
		t.Fatalf("the refused rotation changed the old key: %+v, %v", e, err)
	}
	// To a key already enrolled (from elsewhere) it is no new key.
	if code := r.enrolFrom(t, "198.51.100.3", next); code != 200 {
		t.Fatalf("enrol from another address = %d", code)
	}
	if code, body := r.postFrom(t, addr, "/v2/relay/rotate", r.rotationBody(cur, next)); code != 200 {
		t.Fatalf("rotation to an enrolled key = %d %s", code, body)
	}
	r.clock.Advance(24 * time.Hour)
	cur, next = next, newHost(t, "rot", 63)
	if code, body := r.postFrom(t, addr, "/v2/relay/rotate", r.rotationBody(cur, next)); code != 200 {
		t.Fatalf("rotation the next day = %d %s", code, body)
	}
}
