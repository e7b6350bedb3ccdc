package relayserver_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/relayserver"
)

// postFrom posts body to path as a client at xff (the relay trusts X-Forwarded-For).
func (r *relay) postFrom(t *testing.T, xff, path string, body []byte) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest("POST", r.ts.URL+path, strings.NewReader(string(body)))
	req.Header.Set("X-Forwarded-For", xff)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

// enrolFrom asks for a challenge and answers it, both from xff.
func (r *relay) enrolFrom(t *testing.T, xff string, h host) int {
	t.Helper()
	req, _ := http.NewRequest("POST", r.ts.URL+"/v1/relay/challenge",
		strings.NewReader(string(mustJSON(t, mbx.ChallengeRequest{Host: h.name, Pubkey: h.pub()}))))
	req.Header.Set("X-Forwarded-For", xff)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return resp.StatusCode
	}
	var c mbx.ChallengeResponse
	if err := json.NewDecoder(resp.Body).Decode(&c); err != nil {
		t.Fatal(err)
	}
	er, _ := mbx.SignEnrolment(h.key, h.name, c.Challenge, "")
	code, _ := r.postFrom(t, xff, "/v1/relay/enrol", mustJSON(t, er))
	return code
}

// challengeOf asks the relay for a challenge of h.
func (r *relay) challengeOf(t *testing.T, h host) string {
	t.Helper()
	code, b := r.call(nil, "POST", "/v1/relay/challenge", mustJSON(t, mbx.ChallengeRequest{Host: h.name, Pubkey: h.pub()}))
	if code != 200 {
		t.Fatalf("challenge = %d %s", code, b)
	}
	return decode[mbx.ChallengeResponse](t, b).Challenge
}

func (r *relay) answer(t *testing.T, h host, challenge string) (int, []byte) {
	t.Helper()
	req, err := mbx.SignEnrolment(h.key, h.name, challenge, "")
	if err != nil {
		t.Fatal(err)
	}
	return r.call(nil, "POST", "/v1/relay/enrol", mustJSON(t, req))
}

// Finding 5: nobody can replace or consume another key's challenge, and a bad signature costs
// the key's owner nothing.
func TestChallengeCannotBeStolenOrBurnt(t *testing.T) {
	t.Parallel()
	r := newRelay(t, nil)
	h, other := newHost(t, "alpha", 1), newHost(t, "mallory", 66)
	c := r.challengeOf(t, h)
	// Someone else asks for the same key's challenge (under another name) and answers badly.
	r.challengeOf(t, host{name: "evil", key: h.key})
	bad, _ := mbx.SignEnrolment(other.key, h.name, c, "")
	bad.Pubkey = h.pub()
	if code, out := r.call(nil, "POST", "/v1/relay/enrol", mustJSON(t, bad)); code != 400 {
		t.Fatalf("enrolment signed by another key = %d %s", code, out)
	}
	// Another key cannot use h's challenge either.
	if code, _ := r.answer(t, other, c); code != 400 {
		t.Fatalf("another key answering h's challenge = %d, want 400", code)
	}
	if code, out := r.answer(t, h, c); code != 200 {
		t.Fatalf("h's own answer after the attempts = %d %s", code, out)
	}
}

// Challenges expire: open between one and two lifetimes, then refused.
func TestChallengeExpires(t *testing.T) {
	t.Parallel()
	r := newRelay(t, nil)
	h, g := newHost(t, "alpha", 1), newHost(t, "gamma", 3)
	c := r.challengeOf(t, h)
	r.clock.Advance(mbx.ChallengeTTL - time.Millisecond)
	if code, out := r.answer(t, h, c); code != 200 {
		t.Fatalf("answer within the lifetime = %d %s", code, out)
	}
	c = r.challengeOf(t, g)
	r.clock.Advance(2*mbx.ChallengeTTL + time.Millisecond)
	if code, out := r.answer(t, g, c); code != 400 || !strings.Contains(string(out), "no pending enrolment challenge") {
		t.Fatalf("answer after two lifetimes = %d %s, want 400", code, out)
	}
	if code, out := r.answer(t, g, r.challengeOf(t, g)); code != 200 {
		t.Fatalf("answer to a fresh challenge = %d %s", code, out)
	}
}

// Relays sharing a store share its secret, so a challenge of one is answered at another, and a
// restart forgets nothing.
func TestChallengeSurvivesRestart(t *testing.T) {
	t.Parallel()
	r := newRelay(t, nil)
	h := newHost(t, "alpha", 1)
	c := r.challengeOf(t, h)
	r.restart()
	if code, out := r.answer(t, h, c); code != 200 {
		t.Fatalf("answer after a restart = %d %s", code, out)
	}
}

// Finding 3: a flood of challenges from many /64s of one /56 is bounded by the /56's budget, the
// relay keeps no table that fills, and a fresh host elsewhere enrols.
func TestChallengeFloodFromOneSlash56(t *testing.T) {
	t.Parallel()
	r := newRelay(t, func(o *relayserver.Options) { o.TrustProxy = relayserver.TrustXFF })
	flood := mustJSON(t, mbx.ChallengeRequest{Host: "flood", Pubkey: newHost(t, "flood", 9).pub()})
	ok := 0
	for i := range 1200 { // 400 /64s of 2001:db8:0:ab00::/56, three calls each
		xff := fmt.Sprintf("2001:db8:0:ab%02x::%x", i%256, i/256+1)
		if i%400 >= 256 {
			xff = fmt.Sprintf("2001:db8:0:ab%02x:1::%x", i%144, i/144+1)
		}
		if code, _ := r.postFrom(t, xff, "/v1/relay/challenge", flood); code == 200 {
			ok++
		}
	}
	// The /56 allows 4 × 30 a minute; the clock does not move.
	if ok > 4*mbx.EnrolCallsPerMinute {
		t.Fatalf("%d challenges answered to one /56, want at most %d", ok, 4*mbx.EnrolCallsPerMinute)
	}
	if code := r.enrolFrom(t, "2001:db8:77::5", newHost(t, "fresh", 12)); code != 200 {
		t.Fatalf("fresh host after the flood = %d, want 200", code)
	}
	if code := r.enrolFrom(t, "203.0.113.5", newHost(t, "fresh4", 13)); code != 200 {
		t.Fatalf("fresh IPv4 host after the flood = %d, want 200", code)
	}
}

// Finding 5: a full rate table never lets a client reset its own budget by churning through new
// addresses.
func TestRateTableNoSelfReset(t *testing.T) {
	t.Parallel()
	r := newRelay(t, func(o *relayserver.Options) {
		o.TrustProxy = relayserver.TrustXFF
		o.EnrolCallsPerMinute = 2
		o.RateTableMax = 4
	})
	body := mustJSON(t, mbx.ChallengeRequest{Host: "alpha", Pubkey: newHost(t, "alpha", 1).pub()})
	for i, want := range []int{200, 200, 429} {
		if code, _ := r.postFrom(t, "203.0.113.7", "/v1/relay/challenge", body); code != want {
			t.Fatalf("call %d = %d, want %d", i, code, want)
		}
	}
	for i := range 50 {
		r.postFrom(t, fmt.Sprintf("192.0.2.%d", i), "/v1/relay/challenge", body)
	}
	if n := r.srv.RateTableLen(); n > 4 {
		t.Fatalf("rate table holds %d buckets, cap 4", n)
	}
	if code, _ := r.postFrom(t, "203.0.113.7", "/v1/relay/challenge", body); code != 429 {
		t.Fatalf("the spent address after the churn = %d, want 429", code)
	}
	// Once its bucket has refilled, it is served again.
	r.clock.Advance(time.Minute)
	if code, _ := r.postFrom(t, "203.0.113.7", "/v1/relay/challenge", body); code != 200 {
		t.Fatalf("after a minute = %d, want 200", code)
	}
}

// Finding 2: new enrolments per client address and day are limited; re-enrolling a known key and
// other addresses are not affected.
func TestNewEnrolmentsPerAddressPerDay(t *testing.T) {
	t.Parallel()
	r := newRelay(t, func(o *relayserver.Options) {
		o.TrustProxy = relayserver.TrustXFF
		o.NewEnrolmentsPerDay = 2
	})
	a, b := newHost(t, "a", 21), newHost(t, "b", 22)
	for _, h := range []host{a, b} {
		if code := r.enrolFrom(t, "203.0.113.9", h); code != 200 {
			t.Fatalf("enrol %s = %d", h.name, code)
		}
	}
	if code := r.enrolFrom(t, "203.0.113.9", newHost(t, "c", 23)); code != 429 {
		t.Fatalf("third new key of the day = %d, want 429", code)
	}
	if code := r.enrolFrom(t, "203.0.113.9", a); code != 200 {
		t.Fatalf("re-enrolling a known key = %d, want 200", code)
	}
	if code := r.enrolFrom(t, "198.51.100.3", newHost(t, "c", 23)); code != 200 {
		t.Fatalf("new key from another address = %d, want 200", code)
	}
	r.clock.Advance(24 * time.Hour)
	if code := r.enrolFrom(t, "203.0.113.9", newHost(t, "d", 24)); code != 200 {
		t.Fatalf("new key the next day = %d, want 200", code)
	}
}
