package host

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/checkpoint"
	"github.com/agentmbx/agentmbx/internal/testkit"
	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/outbox"
	"github.com/agentmbx/agentmbx/quarantine"
	"github.com/agentmbx/agentmbx/relayclient"
	"github.com/agentmbx/agentmbx/relaylink"
)

// rawPull pulls th's queue from the relay without processing it.
func (th *testHost) rawPull(after int64) mbx.PullResponse {
	th.t.Helper()
	l, err := th.relayLink()
	if err != nil {
		th.t.Fatal(err)
	}
	page, err := l.Client.Pull(context.Background(), relayclient.PullRequest{After: after})
	if err != nil {
		th.t.Fatalf("%s: pull: %v", th.name, err)
	}
	return page
}

// process hands page (pulled after after) to th's relay handler, as its receiver does.
func (th *testHost) process(r *testRelay, after int64, page mbx.PullResponse) checkpoint.Result {
	th.t.Helper()
	res, err := th.rpos.ProcessPage(context.Background(), r.url, after, page,
		th.relay.Handler(relayclient.Pin{URL: r.url, RelayKey: r.key().PublicKey()}))
	if err != nil {
		th.t.Fatalf("%s: process page: %v", th.name, err)
	}
	return res
}

// TestRelayReorderedAndRepeatedPage: items are taken in seq order whatever the page says, and a
// page seen twice (or an item listed twice) delivers nothing twice.
func TestRelayReorderedAndRepeatedPage(t *testing.T) {
	a, b, r := relayPair(t, mbx.Limits{})
	var ids []string
	for i := range 3 {
		ids = append(ids, a.send("alice", []string{"bob@beta"}, "m"+string(rune('1'+i)), "body").ID)
	}
	a.passOnce()
	page := b.rawPull(0)
	if len(page.Items) != 3 {
		t.Fatalf("page has %d items", len(page.Items))
	}
	mixed := page
	mixed.Items = []mbx.PullItem{page.Items[2], page.Items[0], page.Items[2], page.Items[1], page.Items[0]}
	res := b.process(r, 0, mixed)
	if res.Accepted != 3 || res.Position.ReceivedThrough != page.Items[2].Seq {
		t.Fatalf("reordered page: %+v", res)
	}
	res = b.process(r, 0, page)
	if res.Accepted != 0 || res.Skipped != 3 {
		t.Fatalf("repeated page: %+v, want every item skipped", res)
	}
	got := b.inbox("bob", true)
	var gotIDs []string
	for _, m := range got {
		gotIDs = append(gotIDs, m.ID)
	}
	slices.Sort(gotIDs)
	if !slices.Equal(gotIDs, ids) {
		t.Fatalf("bob's mailbox = %v, want %v once each", gotIDs, ids)
	}
	// The receiver goes on from there: nothing new, and the relay gets its ack.
	if n := b.pull(); n != 0 {
		t.Fatalf("pulled %d more", n)
	}
}

// TestRelayQuarantine: items beta cannot take are held with their reason, never dropped; those
// held only because the sender was not paired are taken once it is.
func TestRelayQuarantine(t *testing.T) {
	a, b, r := relayPair(t, mbx.Limits{})
	ctx := context.Background()
	c := newTestHost(t, "gamma", a.clock)
	// gamma seals for beta with a wrong enc key: undecryptable.
	bad := b.noLAN()
	bad.EncPub = a.enc.PublicKey()
	if err := c.PinPeer(bad); err != nil {
		t.Fatal(err)
	}
	if err := b.PinPeer(c.noLAN()); err != nil {
		t.Fatal(err)
	}
	c.useRelay(r)
	b.keep() // beta's allowlist names gamma now
	undec := c.send("carl", []string{"bob@beta"}, "garbled", "for someone else's key")
	c.passOnce()
	if s := c.rowState(undec.ID, "beta"); s != outbox.StateRelayAccepted {
		t.Fatalf("gamma's row = %s", s)
	}
	// gamma seals properly now, but beta forgets gamma before it pulls.
	if err := c.RemovePeer(ctx, "beta"); err != nil {
		t.Fatal(err)
	}
	if err := c.PinPeer(b.noLAN()); err != nil {
		t.Fatal(err)
	}
	good := c.send("carl", []string{"bob@beta"}, "early", "before beta pins gamma")
	c.passOnce()
	if err := b.RemovePeer(ctx, "gamma"); err != nil {
		t.Fatal(err)
	}
	b.pull()
	items, err := b.Relay().RelayQuarantine(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(items) != 2 {
		t.Fatalf("quarantine = %+v, want 2 items", items)
	}
	byID := map[string]api.QuarantineItem{}
	for _, it := range items {
		byID[it.ItemID] = it
		if it.Relay != r.url || it.Epoch != r.epoch() || it.Seq <= 0 || it.Sender != c.key.PublicKey() || it.At == "" || it.Kind != "envelope" {
			t.Errorf("quarantine item = %+v", it)
		}
	}
	if byID[undec.ID].Cause != quarantine.CauseUnpaired.String() || byID[good.ID].Cause != quarantine.CauseUnpaired.String() {
		t.Fatalf("causes = %+v, want both unpaired (gamma is not pinned)", items)
	}
	if st, _ := b.Relay().RelayStatus(ctx); st.Quarantined != 2 || st.ReceivedThrough == 0 {
		t.Fatalf("status = %+v, want 2 quarantined and the position past them", st)
	}
	// Pinning gamma again releases both: the good one is delivered, the undecryptable one goes
	// back with its new reason.
	if err := b.PinPeer(c.noLAN()); err != nil {
		t.Fatal(err)
	}
	if b.copies("bob", good.ID) != 1 || b.copies("bob", undec.ID) != 0 {
		t.Fatal("release did not deliver exactly the good message")
	}
	items, _ = b.Relay().RelayQuarantine(ctx)
	if len(items) != 1 || items[0].ItemID != undec.ID || items[0].Cause != quarantine.CauseUndecryptable.String() ||
		items[0].Host != "gamma" || !strings.Contains(items[0].Reason, "undecryptable") {
		t.Fatalf("quarantine after pairing = %+v, want the undecryptable item", items)
	}
	// The released message's receipts reach gamma: its row settles.
	flow(t, b, c)
	if s := c.rowState(good.ID, "beta"); s != outbox.StateDone {
		t.Fatalf("gamma's row after the release = %s", s)
	}
}

// TestRelayAckFailure: a failed ack costs nothing: the mail is in the mailbox once, the next step
// acks again, and nothing is delivered twice.
func TestRelayAckFailure(t *testing.T) {
	a, b, r := relayPair(t, mbx.Limits{})
	ctx := context.Background()
	res := a.send("alice", []string{"bob@beta"}, "ack lost", "still once")
	a.passOnce()
	r.set(func(r *testRelay) { r.failAcks = lostTries })
	rcv, err := b.relayReceiver(mustLink(t, b), checkpoint.ReceiverOptions{})
	if err != nil {
		t.Fatal(err)
	}
	st, err := rcv.Step(ctx)
	if err != nil || st.AckErr == nil || st.Done() != 1 {
		t.Fatalf("step with a failing ack: %+v, %v", st, err)
	}
	l := mustLink(t, b)
	info, err := l.Client.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.You.AckedThrough >= st.Position.ReceivedThrough {
		t.Fatalf("relay acked through %d although the ack failed", info.You.AckedThrough)
	}
	st, err = rcv.Step(ctx)
	if err != nil || st.Done() != 0 || st.Acked != st.Position.ReceivedThrough {
		t.Fatalf("next step: %+v, %v; want nothing new and the ack repeated", st, err)
	}
	if info, _ = l.Client.Info(ctx); info.You.AckedThrough != st.Position.ReceivedThrough || info.You.HeadSeq != st.Position.ReceivedThrough {
		t.Fatalf("relay after the repeated ack: %+v", info.You)
	}
	if b.copies("bob", res.ID) != 1 {
		t.Fatal("the message is not in bob's mailbox exactly once")
	}
}

func mustLink(t *testing.T, th *testHost) *relaylink.Conn {
	t.Helper()
	l, err := th.relayLink()
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestRelayAcceptedSettledOverLAN: a relay-accepted row is settled by its delivery receipt when
// that comes over the LAN.
func TestRelayAcceptedSettledOverLAN(t *testing.T) {
	clock := newClock()
	a, b := newTestHost(t, "alpha", clock), newTestHost(t, "beta", clock)
	if err := a.PinPeer(b.noLAN()); err != nil { // alpha cannot reach beta
		t.Fatal(err)
	}
	if err := b.PinPeer(a.record()); err != nil { // beta reaches alpha on its LAN
		t.Fatal(err)
	}
	r := newTestRelay(t, clock, mbx.Limits{})
	a.useRelay(r)
	b.useRelay(r)
	res := a.send("alice", []string{"bob@beta"}, "one way", "receipt comes back over the LAN")
	a.passOnce()
	if s := a.rowState(res.ID, "beta"); s != outbox.StateRelayAccepted {
		t.Fatalf("row = %s", s)
	}
	b.pull()
	pushes, _ := r.counts()
	b.passOnce()
	if p, _ := r.counts(); p != pushes {
		t.Fatal("beta's receipt went to the relay although alpha's LAN answers")
	}
	if s := a.rowState(res.ID, "beta"); s != outbox.StateDone {
		t.Fatalf("row after the LAN receipt = %s, want done", s)
	}
	sent, _ := a.Sent(context.Background(), res.ID)
	if sent.Recipients[0].State != "delivered" {
		t.Fatalf("sent = %+v", sent.Recipients)
	}
}

// TestRelayExpiryNotice: the relay's signed expiry notice ends the relay-accepted row expired and
// alerts the sender like the LAN's 72 h; a notice not signed by the pinned relay is quarantined.
func TestRelayExpiryNotice(t *testing.T) {
	a, b, r := relayPair(t, mbx.Limits{})
	res := a.send("alice", []string{"bob@beta"}, "will expire", "beta never pulls")
	a.passOnce()
	row := a.row(res.ID, "beta")
	notice := func(k mbx.SigningKey, seq int64) mbx.PullItem {
		n, err := mbx.SignExpiryNotice(k, res.ID, b.key.PublicKey(), row.AcceptedAt, a.clock.Now())
		if err != nil {
			t.Fatal(err)
		}
		wire, err := n.Wire()
		if err != nil {
			t.Fatal(err)
		}
		return mbx.PullItem{Seq: seq, Kind: mbx.ItemKindExpired, ItemID: n.Notice.NoticeItemID(), SenderPubkey: k.PublicKey(), WireB64: mbx.B64(wire)}
	}
	impostor, _ := mbx.GenerateSigningKey(testkit.Rand(58))
	pos, _ := a.rpos.Position(context.Background(), r.url)
	page := mbx.PullResponse{Epoch: r.epoch(), HeadSeq: 2, LastSeq: 2,
		Items: []mbx.PullItem{notice(impostor, 1), notice(r.key(), 2)}}
	if pos.Epoch != "" && pos.Epoch != r.epoch() {
		t.Fatalf("alpha's position epoch %q", pos.Epoch)
	}
	got := a.process(r, 0, page)
	if got.Accepted != 1 || got.Quarantined != 1 {
		t.Fatalf("notice page: %+v", got)
	}
	row = a.row(res.ID, "beta")
	if row.State != outbox.StateExpired || !strings.Contains(row.Reason, "relay dropped it") {
		t.Fatalf("row = %s (%q), want expired", row.State, row.Reason)
	}
	al := a.alerts("alice")
	if len(al) != 1 || !strings.HasPrefix(al[0].Subject, "Undelivered to beta: will expire") {
		t.Fatalf("alerts = %+v", al)
	}
	items, _ := a.Relay().RelayQuarantine(context.Background())
	if len(items) != 1 || items[0].Cause != quarantine.CauseBadSignature.String() || items[0].Kind != "expired" {
		t.Fatalf("quarantine = %+v, want the impostor's notice", items)
	}
}

// TestRelayEpochChange: the relay rotates its epoch (a restore that kept the data) and later loses
// everything (a restore from nothing). Senders re-push their relay-accepted rows, receivers pull
// again from 0, both enrol again; nothing is lost and no mailbox holds anything twice.
func TestRelayEpochChange(t *testing.T) {
	a, b, r := relayPair(t, mbx.Limits{})
	ctx := context.Background()
	m1 := a.send("alice", []string{"bob@beta"}, "m1", "delivered, receipt not yet sent")
	m2 := a.send("alice", []string{"bob@beta"}, "m2", "not yet pulled")
	a.passOnce()
	if n := b.pull(); n != 2 {
		t.Fatalf("beta pulled %d", n)
	}
	m3 := a.send("alice", []string{"bob@beta"}, "m3", "pushed before the rotation")
	a.passOnce()
	oldEpoch := r.epoch()

	r.rotateEpoch()
	a.keep() // alpha's info shows the new epoch: re-push
	if a.row(m1.ID, "beta").Repush != true || a.row(m3.ID, "beta").Repush != true {
		t.Fatal("relay-accepted rows were not flagged for a re-push")
	}
	a.passOnce()
	for _, id := range []string{m1.ID, m2.ID, m3.ID} {
		row := a.row(id, "beta")
		if row.State != outbox.StateRelayAccepted || row.Epoch != r.epoch() || row.Repush {
			t.Fatalf("row %s after the re-push: %s in epoch %s (old %s), repush %v", id, row.State, row.Epoch, oldEpoch, row.Repush)
		}
	}
	b.pull() // 409 → reset → from 0
	if pos, _ := b.rpos.Position(ctx, r.url); pos.Epoch != r.epoch() || pos.Resets != 1 {
		t.Fatalf("beta's position = %+v, want reset into the new epoch", pos)
	}
	flow(t, a, b)
	for _, id := range []string{m1.ID, m2.ID, m3.ID} {
		if a.rowState(id, "beta") != outbox.StateDone || b.copies("bob", id) != 1 {
			t.Fatalf("after the rotation: row %s %s, %d copies", id, a.rowState(id, "beta"), b.copies("bob", id))
		}
	}

	// A restore from nothing: new epoch, no enrolments, no items. m4 is delivered to beta and
	// its receipt accepted by the relay, then the relay loses it all before alpha pulls.
	m4 := a.send("alice", []string{"bob@beta"}, "m4", "receipt lost in the wipe")
	a.passOnce()
	b.pull()
	b.passOnce()
	r.wipe()
	a.clock.Advance(time.Minute)
	if _, err := a.relayReceive(ctx); err != nil { // 401 → enrol again → 409 → reset
		t.Fatalf("alpha's receive after the wipe: %v", err)
	}
	st, _ := a.Relay().RelayStatus(ctx)
	if !st.Enrolled || st.Epoch != r.epoch() || a.row(m4.ID, "beta").Repush != true {
		t.Fatalf("alpha after the wipe: %+v, repush %v", st, a.row(m4.ID, "beta").Repush)
	}
	b.keep()
	flow(t, a, b)
	for _, id := range []string{m1.ID, m2.ID, m3.ID, m4.ID} {
		if a.rowState(id, "beta") != outbox.StateDone || b.copies("bob", id) != 1 {
			t.Fatalf("after the wipe: row %s %s, %d copies", id, a.rowState(id, "beta"), b.copies("bob", id))
		}
	}
	if len(a.alerts("alice")) != 0 {
		t.Fatal("an alert was sent although everything arrived")
	}
}

// pushUnrecorded pushes th's due rows to host through the relay and returns them with their
// outcomes, unrecorded: the state between a relay's answer and the transaction that records it.
func (th *testHost) pushUnrecorded(host string) ([]outbox.Row, []outbox.Outcome) {
	th.t.Helper()
	due, err := th.ob.Due(context.Background(), 0)
	if err != nil {
		th.t.Fatal(err)
	}
	var rows []outbox.Row
	for _, r := range due {
		if r.Host == host {
			rows = append(rows, r)
		}
	}
	c := th.relay.Usable()
	if len(rows) == 0 || c == nil {
		th.t.Fatalf("%s: %d rows due to %s, relay usable %v", th.name, len(rows), host, c != nil)
	}
	out := th.relay.Pusher(c).Send(context.Background(), outbox.Peer{}, rows)
	for i, o := range out {
		if o.Kind != outbox.OutcomeRelayAccepted {
			th.t.Fatalf("%s: push of %s: %v %v", th.name, rows[i].Key(), o.Kind, o.Err)
		}
	}
	return rows, out
}

// TestRelayAcceptRecordedAfterEpochChange: the relay accepts a push, loses it in a restore from
// nothing (a new epoch), and the host learns the new epoch before it records the push's answer
// (the soak's lost message). The row is recorded relay-accepted in the old epoch and flagged
// for a re-push at once, so the message still arrives; a receipt recorded the same way is
// queued again.
func TestRelayAcceptRecordedAfterEpochChange(t *testing.T) {
	a, b, r := relayPair(t, mbx.Limits{})
	ctx := context.Background()
	m := a.send("alice", []string{"bob@beta"}, "m", "accepted, then wiped before it was recorded")
	rows, out := a.pushUnrecorded("beta")
	oldEpoch := r.epoch()
	r.wipe()
	a.clock.Advance(time.Minute)
	a.keep() // alpha learns the new epoch; m's row is still pending, nothing to flag
	if a.row(m.ID, "beta").State != outbox.StatePending {
		t.Fatalf("m's row before the record: %+v", a.row(m.ID, "beta"))
	}
	if !a.Host.record(ctx, "beta", rows, out, outbox.TransportRelay) {
		t.Fatal("record failed")
	}
	row := a.row(m.ID, "beta")
	if row.State != outbox.StateRelayAccepted || row.Epoch != oldEpoch || !row.Repush {
		t.Fatalf("m's row recorded in the old epoch %s: %s in %s, repush %v", oldEpoch, row.State, row.Epoch, row.Repush)
	}
	b.keep()
	flow(t, a, b)
	if a.rowState(m.ID, "beta") != outbox.StateDone || b.copies("bob", m.ID) != 1 {
		t.Fatalf("m after the wipe: row %s, %d copies", a.rowState(m.ID, "beta"), b.copies("bob", m.ID))
	}

	// The receipt side: beta's receipt for m2 is accepted, the epoch changes (the relay kept
	// m2, so alpha never re-pushes it and beta never pulls it again), then beta records it.
	m2 := a.send("alice", []string{"bob@beta"}, "m2", "its receipt is recorded late")
	a.passOnce()
	if n := b.pull(); n != 1 {
		t.Fatalf("beta pulled %d", n)
	}
	receipts := func() (active int) {
		list, err := b.ob.List(ctx, outbox.Filter{Host: "alpha", Active: true})
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range list {
			if x.Kind == outbox.KindReceipt && x.MsgID == m2.ID && x.State.Active() {
				active++
			}
		}
		return active
	}
	rows, out = b.pushUnrecorded("alpha")
	r.rotateEpoch()
	b.clock.Advance(time.Minute)
	b.keep()
	if !b.Host.record(ctx, "alpha", rows, out, outbox.TransportRelay) {
		t.Fatal("record failed")
	}
	if n := receipts(); n != 1 {
		t.Fatalf("receipts of m2 queued again after a late record: %d, want 1", n)
	}
	flow(t, a, b)
	if a.rowState(m2.ID, "beta") != outbox.StateDone || b.copies("bob", m2.ID) != 1 {
		t.Fatalf("m2: row %s, %d copies", a.rowState(m2.ID, "beta"), b.copies("bob", m2.ID))
	}
}

// TestRelayPublications: the enc-key ad is republished daily and the sender allowlist when the
// peers change; a refused publication is a reported problem, not a success.
func TestRelayPublications(t *testing.T) {
	a, b, r := relayPair(t, mbx.Limits{})
	ctx := context.Background()
	st0, _ := a.Relay().RelayStatus(ctx)
	if st0.Senders != 1 {
		t.Fatalf("senders = %d, want 1 (beta)", st0.Senders)
	}
	a.clock.Advance(time.Hour)
	a.keep()
	if st, _ := a.Relay().RelayStatus(ctx); st.EncAdAt != st0.EncAdAt || st.SendersAt != st0.SendersAt {
		t.Fatalf("nothing changed, yet something was republished: %+v", st)
	}
	c := newTestHost(t, "gamma", a.clock)
	if err := a.PinPeer(c.noLAN()); err != nil {
		t.Fatal(err)
	}
	a.keep()
	st1, _ := a.Relay().RelayStatus(ctx)
	if st1.Senders != 2 || st1.SendersAt == st0.SendersAt || st1.EncAdAt != st0.EncAdAt {
		t.Fatalf("after pinning gamma: %+v", st1)
	}
	a.clock.Advance(mbx.EncAdRefresh)
	a.keep()
	st2, _ := a.Relay().RelayStatus(ctx)
	if st2.EncAdAt == st1.EncAdAt || st2.EncAdExp == st1.EncAdExp {
		t.Fatalf("the enc-key ad was not republished after a day: %+v", st2)
	}
	// The relay holds alpha's current ad: beta can fetch it.
	l := mustLink(t, b)
	enc, _, err := l.Client.FetchEncAd(ctx, mbx.EncAdPeer{Host: "alpha", HostPubkey: a.key.PublicKey()}, nil)
	if err != nil || enc != a.enc.PublicKey() {
		t.Fatalf("beta fetched alpha's enc key %q, %v", enc, err)
	}
	// A sender allowlist the relay refuses (no newer than the one it holds: same millisecond)
	// is a recorded problem, not a success; the next run publishes it.
	a.clock.Advance(time.Hour)
	if err := a.PinPeer(c.noLAN()); err != nil {
		t.Fatal(err)
	}
	if err := a.RemovePeer(ctx, "gamma"); err != nil {
		t.Fatal(err)
	}
	if err := a.PinPeer(c.noLAN()); err != nil {
		t.Fatal(err)
	}
	a.keep() // gamma is back: the list is the one published, nothing to do
	if err := a.RemovePeer(ctx, "gamma"); err != nil {
		t.Fatal(err)
	}
	a.clock.Advance(-25*time.Hour - time.Minute) // the clock steps back: the new list is older than the relay's
	if err := a.relayKeep(ctx, false); err == nil {
		t.Fatal("relayKeep reported success for a refused sender list")
	}
	st3, _ := a.Relay().RelayStatus(ctx)
	if st3.Senders != 2 || len(st3.Problems) != 1 || st3.Problems[0].Op != relaylink.OpSenders || !strings.Contains(st3.Problems[0].Error, "newer") {
		t.Fatalf("status after a refused list = %+v", st3)
	}
	a.clock.Advance(2 * time.Hour)
	a.keep()
	if st, _ := a.Relay().RelayStatus(ctx); st.Senders != 1 || len(st.Problems) != 0 {
		t.Fatalf("status after the list went through = %+v", st)
	}
	_ = r
}
