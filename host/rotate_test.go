package host

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/internal/testkit"
	"github.com/agentmbx/agentmbx/lan"
	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/outbox"
	"github.com/agentmbx/agentmbx/relayclient"
	"github.com/agentmbx/agentmbx/relaylink"
	"github.com/agentmbx/agentmbx/rotation"
)

// rotate rotates th's host key as `agentmbx id rotate` does: the host is closed, PrepareRotation
// runs on its home, and the host opens again (its LAN server keeps its address).
func (th *testHost) rotate() mbx.SignedRotation {
	th.t.Helper()
	if err := th.Host.Close(); err != nil {
		th.t.Fatal(err)
	}
	seed := uint64(len(th.name))<<8 | uint64(th.name[0]) + 1000
	s, err := PrepareRotation(th.dir, rotation.Options{Rand: testkit.Rand(seed), Clock: th.clock.Now})
	if err != nil {
		th.t.Fatalf("%s: PrepareRotation: %v", th.name, err)
	}
	th.reopen()
	if th.key.PublicKey() != s.Rec.NewPub || th.enc.PublicKey() != s.Rec.NewEncPub {
		th.t.Fatalf("%s: reopened with %s, want the rotation's new key", th.name, th.key.Fingerprint())
	}
	return s
}

// reopen opens th's home again (after a Close) behind the same LAN address.
func (th *testHost) reopen() {
	th.t.Helper()
	seed := uint64(len(th.name))<<8 | uint64(th.name[0]) + 2000
	h, err := Open(th.dir, &Options{Clock: th.clock.Now, Rand: testkit.Rand(seed), Jitter: noJitter,
		Logger: testLogger(th.t).With("host", th.name), HTTPClient: &http.Client{Timeout: 10 * time.Second}})
	if err != nil {
		th.t.Fatalf("%s: Open: %v", th.name, err)
	}
	th.Host = h
	th.gate.setNext(h.LANMux())
	th.t.Cleanup(func() { h.Close() })
}

// finishRotation runs th's rotation steps until they are done.
func (th *testHost) finishRotation() {
	th.t.Helper()
	for i := 0; i < 5; i++ {
		done, err := th.rot.RunOnce(context.Background())
		if done {
			return
		}
		th.t.Logf("%s: rotation not done yet: %v", th.name, err)
	}
	st, _ := th.rot.Load()
	th.t.Fatalf("%s: rotation not done after 5 runs: %+v", th.name, st)
}

// checkRotated checks that th pins peer's rotation: the new keys current, the old one retired.
func (th *testHost) checkRotated(peer string, s mbx.SignedRotation) {
	th.t.Helper()
	p, err := th.peerRecord(peer)
	if err != nil {
		th.t.Fatal(err)
	}
	if p.HostPubkey != s.Rec.NewPub || p.EncPub != s.Rec.NewEncPub || !slices.Contains(p.RetiredKeys, s.Rec.OldPub) || p.RotatedAt != s.Rec.IAT {
		th.t.Fatalf("%s pins %s as %+v, want the rotation to %s applied", th.name, peer, p, mbx.Fingerprint(s.Rec.NewPub))
	}
	if ap := p.API(); ap.RotatedAt == "" || !slices.Contains(ap.RetiredFingerprints, mbx.Fingerprint(s.Rec.OldPub)) {
		th.t.Errorf("peers shows %+v, want the retired fingerprint and the rotation time", ap)
	}
}

// allDone checks that every outbox row of th ended done.
func (th *testHost) allDone() {
	th.t.Helper()
	for _, r := range th.rows() {
		if r.State != outbox.StateDone {
			th.t.Errorf("%s: row %s is %s (%s), want done", th.name, r.Key(), r.State, r.LastError)
		}
	}
}

// TestRotationLAN: alpha rotates while mail waits both ways over the LAN. Beta learns the new key
// from POST /v1/rotate, nothing is lost or duplicated, and the receipt alpha signed with its old
// key before the rotation still settles at beta.
func TestRotationLAN(t *testing.T) {
	clock := newClock()
	a, b := newTestHost(t, "alpha", clock), newTestHost(t, "beta", clock)
	pairAll(t, a, b)
	ctx := context.Background()
	first := a.send("alice", []string{"bob@beta"}, "before", "before the rotation")
	settle(t, a, b)

	// Beta's LAN goes down: alpha's receipt for beta's next message and alpha's next message
	// wait, both signed with the old key.
	b.gate.setDown(true)
	fromB := b.send("bob", []string{"alice@alpha"}, "to alpha", "sealed to alpha's old enc key")
	fromA := a.send("alice", []string{"bob@beta"}, "waiting", "signed with alpha's old key")
	settle(t, a, b)
	if a.copies("alice", fromB.ID) != 1 {
		t.Fatal("alpha did not get beta's message")
	}

	s := a.rotate()
	// Beta does not know yet: its mail is sealed to alpha's old enc key, which alpha kept.
	during := b.send("bob", []string{"alice@alpha"}, "during", "beta still pins the old key")
	b.gate.setDown(false)
	settle(t, a, b)
	if a.copies("alice", during.ID) != 1 {
		t.Fatal("alpha did not open mail sealed to its retired enc key")
	}
	a.finishRotation()
	b.checkRotated("alpha", s)
	st, _ := a.rot.Load()
	if st.Peers["beta"].LAN != "applied" || st.Done == "" {
		t.Fatalf("alpha's rotation record = %+v %+v", st, st.Peers["beta"])
	}

	clock.Advance(time.Hour) // past every backoff
	after := a.send("alice", []string{"bob@beta"}, "after", "signed with the new key")
	settle(t, a, b)
	for _, m := range []struct {
		h     *testHost
		agent string
		id    string
	}{{b, "bob", first.ID}, {b, "bob", fromA.ID}, {b, "bob", after.ID}, {a, "alice", fromB.ID}, {a, "alice", during.ID}} {
		if n := m.h.copies(m.agent, m.id); n != 1 {
			t.Errorf("%s has %d copies of %s, want 1", m.h.name, n, m.id)
		}
	}
	settle(t, a, b) // the notified receipts the copies check just made
	a.allDone()     // the old-signed receipt for fromB included
	b.allDone()

	t.Run("then beta rotates too", func(t *testing.T) {
		s2 := b.rotate()
		b.finishRotation()
		a.checkRotated("beta", s2)
		id := a.send("alice", []string{"bob@beta"}, "both rotated", "new keys on both sides").ID
		back := b.send("bob", []string{"alice@alpha"}, "both rotated", "and back").ID
		settle(t, a, b)
		if b.copies("bob", id) != 1 || a.copies("alice", back) != 1 {
			t.Fatal("mail after both rotations did not arrive once")
		}
		settle(t, a, b)
		a.allDone()
		b.allDone()
	})

	t.Run("replay changes nothing", func(t *testing.T) {
		before := b.counts()
		applied, err := lan.PostRotation(ctx, http.DefaultClient, b.addr, mustJSON(t, s))
		if err != nil || applied {
			t.Fatalf("replay = %v, %v; want taken, not applied", applied, err)
		}
		if got := b.counts(); !maps.Equal(got, before) {
			t.Errorf("counts %v, want %v", got, before)
		}
		b.checkRotated("alpha", s)
	})
}

// TestRotationRelayOnly: alpha and beta reach each other only through the relay. Alpha rotates
// with mail queued both ways, a row of beta's relay-accepted and awaiting its receipt, and a
// receipt alpha signed with its old key not pushed yet. Beta learns the rotation from the relay
// notice, every row settles, nothing is lost or duplicated, and the relay moved alpha's queue.
func TestRotationRelayOnly(t *testing.T) {
	a, b, r := relayPair(t, mbx.Limits{})
	ctx := context.Background()
	m0 := a.send("alice", []string{"bob@beta"}, "hello", "before")
	flow(t, a, b)

	b1 := b.send("bob", []string{"alice@alpha"}, "b1", "pulled before the rotation")
	a1 := a.send("alice", []string{"bob@beta"}, "a1", "pushed before the rotation")
	for _, h := range []*testHost{a, b} {
		if _, err := h.pass(ctx, true); err != nil {
			t.Fatal(err)
		}
	}
	if a.pull() != 1 {
		t.Fatal("alpha did not pull b1")
	}
	a.inbox("alice", false) // notified: alpha's receipts, signed with the old key, wait unpushed
	b2 := b.send("bob", []string{"alice@alpha"}, "b2", "queued for alpha's old key")
	if _, err := b.pass(ctx, true); err != nil {
		t.Fatal(err)
	}
	if s := b.rowState(b2.ID, "alpha"); s != outbox.StateRelayAccepted {
		t.Fatalf("b2 is %s, want relay-accepted", s)
	}
	oldA := a.key.PublicKey()

	s := a.rotate()
	if _, err := a.relayLink(); !errors.Is(err, rotation.ErrRelayRotating) {
		t.Fatalf("relay link during the rotation = %v, want ErrRelayRotating", err)
	}
	a.finishRotation()
	st, _ := a.rot.Load()
	if st.Relay.Moved < 1 || st.Relay.Checked == "" || !st.Peers["beta"].Noticed() {
		t.Fatalf("alpha's rotation: relay %+v, beta %+v", st.Relay, st.Peers["beta"])
	}

	// Beta still pins the old key: its push to it is refused as revoked, and the row waits.
	b3 := b.send("bob", []string{"alice@alpha"}, "b3", "pushed to the revoked key")
	if _, err := b.pass(ctx, true); err != nil {
		t.Fatal(err)
	}
	row := b.row(b3.ID, "alpha")
	if row.State != outbox.StatePending || row.HostKey != oldA || !strings.Contains(row.LastError, "revoked") {
		t.Fatalf("b3 after a push to the revoked key = %s %q, want pending and the reason", row.State, row.LastError)
	}

	b.pull() // the notice (and alpha's receipts, signed with the old key)
	b.checkRotated("alpha", s)
	// Beta's allowlist at the relay is republished with alpha's new key.
	b.keep()
	if rs, _ := b.loadRelay(); rs.Senders == nil || rs.Senders.Hash != allowHash(s.Rec.NewPub) {
		t.Errorf("beta's published allowlist = %+v, want alpha's new key", rs.Senders)
	}
	for _, id := range []string{b2.ID, b3.ID} {
		if row := b.row(id, "alpha"); row.HostKey != s.Rec.NewPub {
			t.Errorf("beta's row %s (%s) is bound to %s, want the new key", id, row.State, mbx.Fingerprint(row.HostKey))
		}
	}
	if got := b.rowState(b1.ID, "alpha"); got != outbox.StateDone {
		t.Errorf("b1 is %s: alpha's old-signed receipt did not settle it", got)
	}

	r.clock.Advance(time.Hour) // past every backoff
	a4 := a.send("alice", []string{"bob@beta"}, "a4", "signed with the new key")
	flow(t, a, b)
	for _, m := range []struct {
		h     *testHost
		agent string
		id    string
	}{{b, "bob", m0.ID}, {b, "bob", a1.ID}, {b, "bob", a4.ID}, {a, "alice", b1.ID}, {a, "alice", b2.ID}, {a, "alice", b3.ID}} {
		if n := m.h.copies(m.agent, m.id); n != 1 {
			t.Errorf("%s has %d copies of %s, want 1", m.h.name, n, m.id)
		}
	}
	flow(t, a, b) // the notified receipts the copies check just made
	a.allDone()
	b.allDone()
	if st, _ := b.Relay().RelayStatus(ctx); st.Quarantined != 0 {
		t.Errorf("beta quarantined %d items", st.Quarantined)
	}

	// Then beta rotates too, with a message of alpha's waiting for it at the relay.
	a5 := a.send("alice", []string{"bob@beta"}, "a5", "queued for beta's old key").ID
	if _, err := a.pass(ctx, true); err != nil {
		t.Fatal(err)
	}
	s2 := b.rotate()
	b.finishRotation()
	if st, _ := b.rot.Load(); st.Relay.Moved < 1 {
		t.Errorf("beta's rotation moved %d items, want a5", st.Relay.Moved)
	}
	a.pull()
	a.checkRotated("beta", s2)
	b6 := b.send("bob", []string{"alice@alpha"}, "b6", "both rotated").ID
	flow(t, a, b)
	if b.copies("bob", a5) != 1 || a.copies("alice", b6) != 1 {
		t.Fatal("mail across both rotations did not arrive once")
	}
	flow(t, a, b)
	a.allDone()
	b.allDone()
}

// TestApplyRotationRefused: records that do not move the pinned key on are refused, over the API
// and over the LAN (409), and change nothing; replays of applied records are no-ops.
func TestApplyRotationRefused(t *testing.T) {
	clock := newClock()
	a, b, gamma := newTestHost(t, "alpha", clock), newTestHost(t, "beta", clock), newTestHost(t, "gamma", clock)
	pairAll(t, a, b)
	if err := b.PinPeer(gamma.record()); err != nil {
		t.Fatal(err)
	}
	a.send("alice", []string{"bob@beta"}, "hi", "a row and a mailbox entry")
	settle(t, a, b)
	ctx := context.Background()
	old := a.key
	next, _ := mbx.GenerateSigningKey(testkit.Rand(901))
	stranger, _ := mbx.GenerateSigningKey(testkit.Rand(902))
	enc, _ := mbx.GenerateEncKey(testkit.Rand(903))
	now := clock.Now()
	sign := func(host string, from, to mbx.SigningKey, at time.Time) []byte {
		s, err := mbx.SignRotation(host, from, to, enc.PublicKey(), at)
		if err != nil {
			t.Fatal(err)
		}
		return mustJSON(t, s)
	}
	swapSig := func(rec []byte, field string, with mbx.SigningKey) []byte {
		var m map[string]any
		if err := json.Unmarshal(rec, &m); err != nil {
			t.Fatal(err)
		}
		in, _ := mbx.CanonicalJSON(mustJSON(t, m["rec"]))
		m[field] = with.Sign(in)
		return mustJSON(t, m)
	}
	valid := sign("alpha", old, next, now)
	refused := map[string][]byte{
		"from a key beta never pinned": sign("alpha", stranger, next, now),
		"old signature by another key": swapSig(valid, "old_sig", stranger),
		"new signature by another key": swapSig(valid, "new_sig", stranger),
		"an unpaired host":             sign("gamma", old, next, now),
		"iat an hour ahead":            sign("alpha", old, next, now.Add(time.Hour)),
		"to beta's own key":            sign("alpha", old, b.key, now),
		"to a key pinned for gamma":    sign("alpha", old, gamma.key, now),
		"not JSON":                     []byte("{"),
		"oversized":                    []byte(`{"rec":{"host":"alpha"},"pad":"` + strings.Repeat("x", rotation.MaxRecordBytes) + `"}`),
	}
	pinned, _ := b.peerRecord("alpha")
	before := b.counts()
	for name, rec := range refused {
		t.Run(name, func(t *testing.T) {
			if _, err := b.rot.Apply(ctx, rec); !errors.Is(err, rotation.ErrRefused) {
				t.Errorf("ApplyRotation = %v, want rotation.ErrRefused", err)
			}
			if len(rec) <= mbx.RelaySmallBodyMax-64 {
				_, err := lan.PostRotation(ctx, http.DefaultClient, b.addr, rec)
				if name != "not JSON" && !errors.Is(err, lan.ErrRotationNotTaken) {
					t.Errorf("over the LAN = %v, want not taken", err)
				}
			}
			if p, _ := b.peerRecord("alpha"); p.HostPubkey != pinned.HostPubkey || len(p.RetiredKeys) != 0 {
				t.Errorf("peer changed to %+v", p)
			}
		})
	}
	if got := b.counts(); !maps.Equal(got, before) {
		t.Errorf("counts %v after refusals, want %v", got, before)
	}

	res, err := b.rot.Apply(ctx, valid)
	if err != nil || !res.Applied {
		t.Fatalf("valid rotation = %+v, %v", res, err)
	}
	third, _ := mbx.GenerateSigningKey(testkit.Rand(904))
	second := sign("alpha", next, third, now.Add(time.Minute))
	if res, err := b.rot.Apply(ctx, second); err != nil || !res.Applied {
		t.Fatalf("second rotation = %+v, %v", res, err)
	}
	after := b.counts()
	for name, rec := range map[string][]byte{"the last one": second, "an older one": valid} {
		if res, err := b.rot.Apply(ctx, rec); err != nil || res.Applied {
			t.Errorf("replay of %s = %+v, %v; want a no-op", name, res, err)
		}
	}
	if got := b.counts(); !maps.Equal(got, after) {
		t.Errorf("counts %v after replays, want %v", got, after)
	}
	t.Run("a retired key cannot branch off", func(t *testing.T) {
		if _, err := b.rot.Apply(ctx, sign("alpha", old, stranger, now.Add(2*time.Minute))); !errors.Is(err, rotation.ErrRefused) {
			t.Errorf("rotation from a retired key = %v, want refused", err)
		}
	})
	t.Run("an old card cannot roll the pin back", func(t *testing.T) {
		if err := b.PinPeer(PeerRecord{Host: "alpha", HostPubkey: old.PublicKey(), EncPub: a.enc.PublicKey()}); !errors.Is(err, api.ErrPeerKeyMismatch) {
			t.Errorf("pin of the old key = %v, want api.ErrPeerKeyMismatch", err)
		}
	})
	p, _ := b.peerRecord("alpha")
	if p.HostPubkey != third.PublicKey() || !slices.Equal(p.RetiredKeys, []string{old.PublicKey(), next.PublicKey()}) {
		t.Errorf("peer = %+v, want the chain old → next → third", p)
	}
	for _, r := range b.rows() {
		if r.State.Active() && r.HostKey != third.PublicKey() {
			t.Errorf("active row %s still bound to %s", r.Key(), mbx.Fingerprint(r.HostKey))
		}
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestRevokedTargetWaitsForItsDeadline: a push to a key the relay revoked (its host rotated, and
// the rotation has not reached this host) is refused as "target revoked", which keeps the row
// pending through every retry until its own deadline; only then does it end expired.
func TestRevokedTargetWaitsForItsDeadline(t *testing.T) {
	a, b, _ := relayPair(t, mbx.Limits{})
	ctx := context.Background()
	id := b.send("bob", []string{"alice@alpha"}, "to the old key", "beta never learns the rotation").ID
	a.rotate()
	a.finishRotation()
	deadline := b.row(id, "alpha").Deadline
	tries := 0
	for b.clock.Now().Before(deadline.Add(-time.Hour)) {
		if _, err := b.pass(ctx, true); err != nil {
			t.Fatal(err)
		}
		if _, err := b.sweep(ctx); err != nil {
			t.Fatal(err)
		}
		row := b.row(id, "alpha")
		if row.State != outbox.StatePending {
			t.Fatalf("after %d tries the row is %s (%s), want pending until %s", tries, row.State, row.LastError, deadline)
		}
		if row.Attempts > 0 && !strings.Contains(row.LastError, "revoked") {
			t.Fatalf("last error %q, want the revocation", row.LastError)
		}
		tries = row.Attempts
		next := b.clock.Now().Add(10 * time.Hour) // a few tries: each push waits for the pacer
		if row.NextAt.After(next) {
			next = row.NextAt
		}
		b.clock.Set(next)
	}
	if tries < 5 {
		t.Fatalf("only %d tries before the deadline", tries)
	}
	b.clock.Set(deadline.Add(time.Minute))
	if _, err := b.sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if s := b.rowState(id, "alpha"); s != outbox.StateExpired {
		t.Fatalf("after the deadline the row is %s, want expired", s)
	}
}

// allowHash is the hash of the sender allowlist of keys.
func allowHash(keys ...string) string {
	_, h := relaylink.AllowList(keys)
	return h
}

// TestRotationNoticeRefused: a rotation notice through the relay whose record does not verify
// against the pinned key goes to the quarantine and changes nothing; a notice of the rotation
// applied already is a duplicate.
func TestRotationNoticeRefused(t *testing.T) {
	a, b, r := relayPair(t, mbx.Limits{})
	ctx := context.Background()
	c, err := relayclient.New(relayclient.Pin{URL: r.url, RelayKey: r.key().PublicKey()}, "alpha", a.key, &relayclient.Options{Clock: a.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	push := func(itemID string, rec []byte) {
		t.Helper()
		wire, err := mbx.SealRotationNotice(a.rand, itemID, rec, b.enc.PublicKey())
		if err != nil {
			t.Fatal(err)
		}
		res, err := c.Push(ctx, []relayclient.PushItem{{Kind: mbx.ItemKindEnvelope, ItemID: itemID,
			Targets: []relayclient.PushTarget{{HostPubkey: b.key.PublicKey(), Wire: wire}}}})
		if err != nil || !res[0].Targets[0].Accepted() {
			t.Fatalf("push of the notice: %+v, %v", res, err)
		}
	}
	stranger, _ := mbx.GenerateSigningKey(testkit.Rand(911))
	next, _ := mbx.GenerateSigningKey(testkit.Rand(912))
	forged, err := mbx.SignRotation("alpha", stranger, next, b.enc.PublicKey(), a.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	push(mbx.RotationNoticeID(next.PublicKey(), b.key.PublicKey()), mustJSON(t, forged))
	before, _ := b.peerRecord("alpha")
	b.pull()
	if p, _ := b.peerRecord("alpha"); p.HostPubkey != before.HostPubkey || len(p.RetiredKeys) != 0 {
		t.Fatalf("a forged notice changed the pin: %+v", p)
	}
	if st, _ := b.Relay().RelayStatus(ctx); st.Quarantined != 1 {
		t.Fatalf("quarantined %d items, want the forged notice", st.Quarantined)
	}

	s := a.rotate()
	a.finishRotation()
	b.pull()
	b.checkRotated("alpha", s)
	// The same record again in a second notice (another item id): nothing changes, nothing is
	// quarantined. The old key is revoked at the relay now, so the new key pushes it.
	c, err = relayclient.New(relayclient.Pin{URL: r.url, RelayKey: r.key().PublicKey()}, "alpha", a.key, &relayclient.Options{Clock: a.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	push("host-rotation:again", mustJSON(t, s))
	b.pull()
	b.checkRotated("alpha", s)
	if st, _ := b.Relay().RelayStatus(ctx); st.Quarantined != 1 {
		t.Fatalf("quarantined %d items after a replay, want still 1", st.Quarantined)
	}
}
