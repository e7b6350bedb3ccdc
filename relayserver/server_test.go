package relayserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/relayserver"
	"github.com/agentmbx/agentmbx/relayserver/sqlitestore"
)

// three enrolled hosts: alpha sends, beta and gamma receive.
func setup(t *testing.T, opts func(*relayserver.Options)) (*relay, host, host, host) {
	return setupMode(t, opts, false)
}

// setupMode is setup whose long polls park the standard way when standard is set.
func setupMode(t *testing.T, opts func(*relayserver.Options), standard bool) (*relay, host, host, host) {
	r := newRelayMode(t, opts, sqlitestore.Options{}, standard)
	a, b, g := newHost(t, "alpha", 1), newHost(t, "beta", 2), newHost(t, "gamma", 3)
	for _, h := range []host{a, b, g} {
		r.enrol(h)
	}
	return r, a, b, g
}

func TestPushPullAckRoundTrip(t *testing.T) {
	t.Parallel()
	r, a, b, _ := setup(t, nil)
	id := "01KKNTQ2CN9WJ3MR4Q1P12F02T"
	resp := r.push(a, envItem(id, b))
	if got := statuses(resp); len(got) != 1 || got[0] != "accepted" {
		t.Fatalf("push statuses = %v, want [accepted]", got)
	}
	res := resp.Results[0]
	// The accept statement verifies with the relay key, for the bytes sent.
	acc, seq, err := mbx.ValidAccept(res, r.key.PublicKey(), a.pub(), id, b.pub(), mbx.WireHash(envWire(id, "")))
	if err != nil {
		t.Fatalf("ValidAccept: %v", err)
	}
	if seq != t0.UnixMilli() || acc.Epoch != r.srv.Epoch() || acc.At != mbx.ISOTime(t0) {
		t.Fatalf("accept = %+v seq %d; want seq now_ms %d, current epoch, at now", acc, seq, t0.UnixMilli())
	}
	p := r.pull(b, 0)
	if len(p.Items) != 1 || p.Items[0].Seq != seq || p.HeadSeq != seq || p.LastSeq != seq || p.More || p.Epoch != r.srv.Epoch() {
		t.Fatalf("pull = %+v", p)
	}
	if p.Items[0].SenderPubkey != a.pub() || p.Items[0].Kind != "envelope" {
		t.Fatalf("pulled item = %+v", p.Items[0])
	}
	// The sender's queue is its own: alpha sees nothing.
	if p := r.pull(a, 0); len(p.Items) != 0 || p.HeadSeq != 0 || p.LastSeq != 0 {
		t.Fatalf("alpha's pull = %+v, want empty", p)
	}
	code, body := r.call(&b, "POST", "/v2/relay/ack", mustJSON(t, mbx.AckRequest{Epoch: r.srv.Epoch(), Through: seq}))
	ack := decode[mbx.AckResponse](t, body)
	if code != 200 || ack.Deleted != 1 || ack.AckedThrough != seq || ack.HeadSeq != seq {
		t.Fatalf("ack = %d %s", code, body)
	}
	if p := r.pull(b, 0); len(p.Items) != 0 || p.HeadSeq != seq {
		t.Fatalf("pull after ack = %+v", p)
	}
	// The caller's position in info.
	code, body = r.call(&b, "GET", "/v2/relay/info", nil)
	info := decode[mbx.InfoResponse](t, body)
	if code != 200 || info.You == nil || info.You.HeadSeq != seq || info.You.AckedThrough != seq || info.You.Host != "beta" {
		t.Fatalf("info = %d %s", code, body)
	}
	code, body = r.call(nil, "GET", "/v2/relay/info", nil)
	info = decode[mbx.InfoResponse](t, body)
	if code != 200 || info.You != nil || info.RelayPubkey != r.key.PublicKey() || info.V != 2 || info.Limits != announcedDefaults() {
		t.Fatalf("anonymous info = %d %s", code, body)
	}
}

func TestExactWireBytesInAndOut(t *testing.T) {
	t.Parallel()
	r, a, b, _ := setup(t, nil)
	id := "01KKNTQ2CN9WJ3MR4Q1P12F02T"
	// Not canonical, with spacing, escapes and non-ASCII: the relay must not re-encode anything.
	wire := []byte("{ \"id\" : \"" + id + "\", \"enc\":{\"body\":\"x\"},\n \"subject\":\"Gr\u00fc\u00dfe \\u00e9 <&> \u2028\"}")
	body := []byte(`{"items":[{"kind":"envelope","item_id":"` + id + `","targets":[{"host_pubkey":"` + b.pub() + `","wire_b64":"` + mbx.B64(wire) + `"}]}]}`)
	code, out := r.call(&a, "POST", "/v2/relay/items", body)
	if code != 200 {
		t.Fatalf("push: %d %s", code, out)
	}
	seq := t0.UnixMilli()
	hash := mbx.WireHash(wire)
	accept := `{"v":1,"type":"relay-accept","relay_pubkey":"` + r.key.PublicKey() + `","epoch":"` + r.srv.Epoch() +
		`","sender_pubkey":"` + a.pub() + `","item_id":"` + id + `","targets":[{"host_pubkey":"` + b.pub() +
		`","seq":` + fmt.Sprint(seq) + `,"wire_hash":"` + hash + `"}],"at":"2026-03-14T09:26:53.589Z"}`
	canon, err := mbx.CanonicalJSON([]byte(accept))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"results":[{"item_id":"` + id + `","status":"accepted","targets":[{"host_pubkey":"` + b.pub() +
		`","seq":` + fmt.Sprint(seq) + `}],"accept":` + accept + `,"sig":"` + r.key.Sign(canon) + `"}]}`
	if string(out) != want {
		t.Fatalf("push response bytes:\n got %s\nwant %s", out, want)
	}
	code, out = r.call(&b, "GET", "/v2/relay/items?after=0&limit=10", nil)
	want = `{"epoch":"` + r.srv.Epoch() + `","head_seq":` + fmt.Sprint(seq) + `,"items":[{"seq":` + fmt.Sprint(seq) +
		`,"kind":"envelope","item_id":"` + id + `","sender_pubkey":"` + a.pub() + `","wire_b64":"` + mbx.B64(wire) +
		`"}],"last_seq":` + fmt.Sprint(seq) + `,"more":false}`
	if code != 200 || string(out) != want {
		t.Fatalf("pull response bytes:\n got %d %s\nwant %s", code, out, want)
	}
}

func TestDuplicateRetryReturnsOriginalSeqAndConflictChangesNothing(t *testing.T) {
	t.Parallel()
	r, a, b, _ := setup(t, nil)
	id := "01KKNTQ2CN9WJ3MR4Q1P12F02T"
	first := r.push(a, envItem(id, b)).Results[0]
	r.clock.Advance(time.Minute)
	again := r.push(a, envItem(id, b)).Results[0]
	if again.Status != "duplicate" || again.Targets[0].Seq != first.Targets[0].Seq {
		t.Fatalf("retry = %+v, want duplicate with seq %d", again, first.Targets[0].Seq)
	}
	acc, _, err := mbx.ValidAccept(again, r.key.PublicKey(), a.pub(), id, b.pub(), mbx.WireHash(envWire(id, "")))
	if err != nil || acc.At != mbx.ISOTime(t0) {
		t.Fatalf("duplicate's accept = %+v, %v; want the first acceptance time", acc, err)
	}
	// Same id, other bytes: a conflict, nothing changes.
	other := mbx.PushItem{Kind: "envelope", ItemID: id, Targets: []mbx.PushTarget{{HostPubkey: b.pub(), WireB64: mbx.B64(envWire(id, "X"))}}}
	res := r.push(a, other).Results[0]
	if res.Status != "rejected:conflict" || len(res.Targets) != 0 || res.Accept != nil {
		t.Fatalf("conflicting reuse = %+v, want rejected:conflict without accept", res)
	}
	p := r.pull(b, 0)
	if len(p.Items) != 1 || p.Items[0].WireB64 != mbx.B64(envWire(id, "")) {
		t.Fatalf("queue after conflict = %+v, want the original only", p.Items)
	}
	// Another sender may use the same id: dedup is per (sender, item id, target).
	c := newHost(t, "carol", 9)
	r.enrol(c)
	if st := r.push(c, envItem(id, b)).Results[0].Status; st != "accepted" {
		t.Fatalf("same id from another sender = %s, want accepted", st)
	}
}

func TestPartialFanOutStoresNothing(t *testing.T) {
	t.Parallel()
	r, a, b, g := setup(t, nil)
	stranger := newHost(t, "stranger", 50) // never enrolled
	item := envItem("01KKNTQ2CN9WJ3MR4Q1P12F02T", b, g, stranger)
	res := r.push(a, item).Results[0]
	if res.Status != "rejected:target not enrolled" {
		t.Fatalf("status = %s, want rejected:target not enrolled", res.Status)
	}
	for _, h := range []host{b, g} {
		if p := r.pull(h, 0); len(p.Items) != 0 || p.HeadSeq != 0 {
			t.Fatalf("%s got %+v after a rejected fan-out, want nothing", h.name, p)
		}
	}
	// The other items of the batch are independent.
	resp := r.push(a, envItem("01KKNTQ2CN9WJ3MR4Q1P12F02V", b), item, envItem("01KKNTQ2CN9WJ3MR4Q1P12F02W", g))
	if got := fmt.Sprint(statuses(resp)); got != "[accepted rejected:target not enrolled accepted]" {
		t.Fatalf("batch statuses = %s", got)
	}
}

func TestSeveralAddressesOnOneHostAreOneTarget(t *testing.T) {
	t.Parallel()
	r, a, b, _ := setup(t, nil)
	// bob@beta and carol@beta: the sender merges them into one target; a repeated target is refused.
	item := envItem("01KKNTQ69NA67N0QBPXKXFN5DP", b, b)
	if st := r.push(a, item).Results[0].Status; st != "rejected:duplicate target" {
		t.Fatalf("repeated target = %s, want rejected:duplicate target", st)
	}
	if p := r.pull(b, 0); len(p.Items) != 0 {
		t.Fatalf("repeated target stored %d items", len(p.Items))
	}
	if st := r.push(a, envItem("01KKNTQ69NA67N0QBPXKXFN5DP", b)).Results[0].Status; st != "accepted" {
		t.Fatalf("merged target = %s", st)
	}
}

func TestQuotasRejectWholeItem(t *testing.T) {
	t.Parallel()
	r, a, b, g := setup(t, func(o *relayserver.Options) {
		o.Limits = mbx.DefaultLimits()
		o.Limits.MaxQueueItems = 3
		o.Limits.MaxSenderItems = 2
		o.PushesPerMinute = -1
	})
	c := newHost(t, "carol", 9)
	r.enrol(c)
	id := func(i int) string { return fmt.Sprintf("01KKNTQ69NA67N0QBPXKXFN5%02d", i) }
	// alpha fills its share of beta's queue.
	if got := fmt.Sprint(statuses(r.push(a, envItem(id(1), b), envItem(id(2), b), envItem(id(3), b)))); got != "[accepted accepted rejected:quota:sender_items]" {
		t.Fatalf("sender share = %s", got)
	}
	// An item to gamma and beta is refused whole: gamma gets nothing.
	if st := r.push(a, envItem(id(4), g, b)).Results[0].Status; st != "rejected:quota:sender_items" {
		t.Fatalf("fan-out over quota = %s", st)
	}
	if p := r.pull(g, 0); len(p.Items) != 0 {
		t.Fatalf("gamma got %d items from a refused item", len(p.Items))
	}
	// carol takes the last place of beta's queue, then the queue is full for everyone.
	if got := fmt.Sprint(statuses(r.push(c, envItem(id(5), b), envItem(id(6), b)))); got != "[accepted rejected:quota:queue_items]" {
		t.Fatalf("queue quota = %s", got)
	}
	// Acking frees the queue.
	p := r.pull(b, 0)
	if len(p.Items) != 3 {
		t.Fatalf("beta holds %d items, want 3", len(p.Items))
	}
	code, body := r.call(&b, "POST", "/v2/relay/ack", mustJSON(t, mbx.AckRequest{Epoch: r.srv.Epoch(), Through: p.LastSeq}))
	if code != 200 {
		t.Fatalf("ack: %d %s", code, body)
	}
	if st := r.push(c, envItem(id(6), b)).Results[0].Status; st != "accepted" {
		t.Fatalf("after ack = %s, want accepted", st)
	}
}

func TestByteQuotaAndItemSize(t *testing.T) {
	t.Parallel()
	r, a, b, _ := setup(t, func(o *relayserver.Options) {
		o.Limits = mbx.DefaultLimits()
		o.Limits.MaxItemBytes = 200
		o.Limits.MaxSenderBytes = 200 // one ~115-byte item fits, two do not
	})
	big := mbx.PushItem{Kind: "envelope", ItemID: "01KKNTQ69NA67N0QBPXKXFN500",
		Targets: []mbx.PushTarget{{HostPubkey: b.pub(), WireB64: mbx.B64(envWire("01KKNTQ69NA67N0QBPXKXFN500", strings.Repeat("A", 200)))}}}
	if st := r.push(a, big).Results[0].Status; st != "rejected:item too large" {
		t.Fatalf("oversize item = %s", st)
	}
	if got := fmt.Sprint(statuses(r.push(a, envItem("01KKNTQ69NA67N0QBPXKXFN501", b), envItem("01KKNTQ69NA67N0QBPXKXFN502", b)))); got != "[accepted rejected:quota:sender_bytes]" {
		t.Fatalf("byte quota = %s", got)
	}
}

// accountAuthority proves an account from the proof string "account:<name>".
type accountAuthority struct{}

func (accountAuthority) Name() string { return "token" }
func (accountAuthority) Rank() int    { return 10 }
func (accountAuthority) Authorize(_ context.Context, req relayserver.AuthRequest) (relayserver.AuthDecision, error) {
	if acct, ok := strings.CutPrefix(req.Proof, "account:"); ok {
		return relayserver.AuthDecision{OK: true, Account: acct}, nil
	}
	return relayserver.AuthDecision{OK: false, Reason: "no account token"}, nil
}

func TestAccountQuotaAndAuthority(t *testing.T) {
	t.Parallel()
	auth := &switchAuthority{cur: accountAuthority{}}
	r := newRelay(t, func(o *relayserver.Options) {
		o.Authority = auth
		o.Limits = mbx.DefaultLimits()
		o.Limits.MaxOwnerItems = 2
	})
	a, b, g := newHost(t, "alpha", 1), newHost(t, "beta", 2), newHost(t, "gamma", 3)
	if code, body := r.tryEnrol(a, ""); code != http.StatusForbidden || !strings.Contains(string(body), "no account token") {
		t.Fatalf("enrol without proof = %d %s, want 403", code, body)
	}
	for _, h := range []host{a, b, g} {
		if code, body := r.tryEnrol(h, "account:acme"); code != 200 {
			t.Fatalf("enrol %s: %d %s", h.name, code, body)
		}
	}
	e, _ := r.store.Enrolment(bg, b.pub())
	if e.Account != "acme" || e.AuthorizedBy != "token" {
		t.Fatalf("enrolment = %+v, want account acme by token", e)
	}
	// beta and gamma share acme's quota of 2 items.
	got := statuses(r.push(a, envItem("01KKNTQ69NA67N0QBPXKXFN501", b), envItem("01KKNTQ69NA67N0QBPXKXFN502", g), envItem("01KKNTQ69NA67N0QBPXKXFN503", g)))
	if fmt.Sprint(got) != "[accepted accepted rejected:quota:owner_items]" {
		t.Fatalf("account quota = %v", got)
	}
	// A weaker authority re-enrolling beta does not overwrite the account.
	auth.cur = relayserver.HostKeyAuthority{}
	if code, body := r.tryEnrol(b, ""); code != 200 {
		t.Fatalf("re-enrol by host key: %d %s", code, body)
	}
	e, _ = r.store.Enrolment(bg, b.pub())
	if e.Account != "acme" || e.AuthorizedBy != "token" {
		t.Fatalf("after weaker re-enrolment = %+v, want account acme by token kept", e)
	}
	// Names are unique inside a proven account only.
	auth.cur = accountAuthority{}
	dup := newHost(t, "BETA", 4)
	if code, body := r.tryEnrol(dup, "account:acme"); code != http.StatusConflict {
		t.Fatalf("second BETA in acme = %d %s, want 409", code, body)
	}
	if code, body := r.tryEnrol(dup, "account:other"); code != 200 {
		t.Fatalf("BETA in another account = %d %s", code, body)
	}
}

type switchAuthority struct {
	cur relayserver.EnrolmentAuthority
}

func (s *switchAuthority) Name() string { return s.cur.Name() }
func (s *switchAuthority) Rank() int    { return s.cur.Rank() }
func (s *switchAuthority) Authorize(ctx context.Context, req relayserver.AuthRequest) (relayserver.AuthDecision, error) {
	return s.cur.Authorize(ctx, req)
}

func TestNamesSharedAcrossOwnersAndSquatterGetsNothing(t *testing.T) {
	t.Parallel()
	r, a, _, _ := setup(t, nil)
	mine := newHost(t, "macbook", 20)
	theirs := newHost(t, "macbook", 21) // another owner's macbook, or a squatter of the name
	r.enrol(mine)
	r.enrol(theirs)
	r.push(a, envItem("01KKNTQ69NA67N0QBPXKXFN501", mine))
	if p := r.pull(theirs, 0); len(p.Items) != 0 || p.HeadSeq != 0 {
		t.Fatalf("the other macbook got %+v, want nothing", p)
	}
	if p := r.pull(mine, 0); len(p.Items) != 1 {
		t.Fatalf("the addressed macbook got %d items, want 1", len(p.Items))
	}
	// Re-enrolment is idempotent.
	r.enrol(mine)
	if p := r.pull(mine, 0); len(p.Items) != 1 {
		t.Fatalf("after re-enrolment the queue holds %d items", len(p.Items))
	}
}

func TestRotationMovesQueueAndRevokes(t *testing.T) {
	t.Parallel()
	r, a, b, _ := setup(t, nil)
	r.push(a, envItem("01KKNTQ69NA67N0QBPXKXFN501", b), envItem("01KKNTQ69NA67N0QBPXKXFN502", b))
	next := newHost(t, "beta", 30)
	body := r.rotationBody(b, next)
	code, out := r.call(nil, "POST", "/v2/relay/rotate", body)
	if code != 200 || decode[mbx.RotateResponse](t, out).Moved != 2 {
		t.Fatalf("rotate = %d %s, want 2 moved", code, out)
	}
	p := r.pull(next, 0)
	if fmt.Sprint(ids(p)) != "[01KKNTQ69NA67N0QBPXKXFN501 01KKNTQ69NA67N0QBPXKXFN502]" {
		t.Fatalf("new key's queue = %v", ids(p))
	}
	// A retry of the same rotation is harmless.
	if code, out := r.call(nil, "POST", "/v2/relay/rotate", body); code != 200 {
		t.Fatalf("rotation retry = %d %s", code, out)
	}
	// The old key stays revoked: its hops and its re-enrolment are refused.
	if code, out := r.call(&b, "GET", "/v2/relay/items?after=0", nil); code != http.StatusForbidden {
		t.Fatalf("pull by the old key = %d %s, want 403", code, out)
	}
	if code, out := r.tryEnrol(b, ""); code != http.StatusForbidden {
		t.Fatalf("re-enrol of the old key = %d %s, want 403", code, out)
	}
	e, _ := r.store.Enrolment(bg, b.pub())
	if e.Live() {
		t.Fatalf("old key is live again: %+v", e)
	}
	// Items addressed to the old key now are refused.
	if st := r.push(a, envItem("01KKNTQ69NA67N0QBPXKXFN503", b)).Results[0].Status; st != "rejected:target revoked" {
		t.Fatalf("push to the old key = %s", st)
	}
}

// A sender whose accept was lost retries after the target rotated its key: the item is stored
// (moved to the new key), so the retry to the key it knows is a duplicate with the original seq,
// not a refusal; the same bytes addressed to the new key are a duplicate with the moved seq.
func TestRotationKeepsDuplicatesForTheOldKey(t *testing.T) {
	t.Parallel()
	r, a, b, _ := setup(t, nil)
	item := envItem("01KKNTQ69NA67N0QBPXKXFN501", b)
	first := r.push(a, item).Results[0]
	next := newHost(t, "beta", 30)
	r.rotate(b, next)
	moved := r.pull(next, 0)
	if len(moved.Items) != 1 {
		t.Fatalf("new key's queue = %+v, want the moved item", moved)
	}
	again := r.push(a, item).Results[0]
	if again.Status != "duplicate" || len(again.Targets) != 1 || again.Targets[0].Seq != first.Targets[0].Seq {
		t.Fatalf("retry to the old key after the rotation = %+v, want duplicate with seq %d", again, first.Targets[0].Seq)
	}
	if _, _, err := mbx.ValidAccept(again, r.key.PublicKey(), a.pub(), item.ItemID, b.pub(), mbx.WireHash(envWire(item.ItemID, ""))); err != nil {
		t.Fatalf("the duplicate's accept: %v", err)
	}
	toNew := r.push(a, mbx.PushItem{Kind: "envelope", ItemID: item.ItemID,
		Targets: []mbx.PushTarget{{HostPubkey: next.pub(), WireB64: item.Targets[0].WireB64}}}).Results[0]
	if toNew.Status != "duplicate" || toNew.Targets[0].Seq != moved.Items[0].Seq {
		t.Fatalf("same bytes to the new key = %+v, want duplicate with the moved seq %d", toNew, moved.Items[0].Seq)
	}
	if p := r.pull(next, 0); len(p.Items) != 1 {
		t.Fatalf("after the retries the new key holds %d items, want 1", len(p.Items))
	}
	// Anything new for the old key is still refused.
	if st := r.push(a, envItem("01KKNTQ69NA67N0QBPXKXFN502", b)).Results[0].Status; st != "rejected:target revoked" {
		t.Fatalf("new item to the old key = %s", st)
	}
}

func TestSenderAllowlist(t *testing.T) {
	t.Parallel()
	r, a, b, g := setup(t, nil)
	list, sig, err := mbx.SignSenderList(b.key, []string{a.pub()}, r.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	pub, err := list.Publish(sig)
	if err != nil {
		t.Fatal(err)
	}
	if code, out := r.call(&b, "POST", "/v2/relay/senders", mustJSON(t, pub)); code != 200 {
		t.Fatalf("senders: %d %s", code, out)
	}
	if code, out := r.call(&b, "POST", "/v2/relay/senders", mustJSON(t, pub)); code != http.StatusConflict {
		t.Fatalf("same list again = %d %s, want 409 (stale)", code, out)
	}
	if st := r.push(a, envItem("01KKNTQ69NA67N0QBPXKXFN501", b)).Results[0].Status; st != "accepted" {
		t.Fatalf("listed sender = %s", st)
	}
	if st := r.push(g, envItem("01KKNTQ69NA67N0QBPXKXFN502", b)).Results[0].Status; st != "rejected:sender not accepted by target" {
		t.Fatalf("unlisted sender = %s", st)
	}
	// A list signed for another target is refused.
	if code, _ := r.call(&g, "POST", "/v2/relay/senders", mustJSON(t, pub)); code != http.StatusBadRequest {
		t.Fatalf("beta's list posted by gamma = %d, want 400", code)
	}
}

func TestEncKeyPublishAndLookup(t *testing.T) {
	t.Parallel()
	r, a, b, _ := setup(t, nil)
	ek, _ := mbx.GenerateEncKey(seeded(5))
	ad, sig, err := mbx.SignEncAdV2("alpha", a.key, ek.PublicKey(), r.clock.Now(), 0)
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := ad.Publish(sig)
	if code, out := r.call(&a, "POST", "/v2/relay/enc-key", mustJSON(t, pub)); code != 200 {
		t.Fatalf("publish v2: %d %s", code, out)
	}
	_, v1sig, _ := mbx.SignEncAdV1("alpha", a.key, ek.PublicKey())
	if code, out := r.call(&a, "POST", "/v2/relay/enc-key", mustJSON(t, mbx.EncAdPublishV1{EncPub: ek.PublicKey(), Sig: v1sig})); code != 200 {
		t.Fatalf("publish v1: %d %s", code, out)
	}
	code, out := r.call(nil, "GET", "/v2/relay/enc-key?pubkey="+strings.ReplaceAll(a.pub(), "+", "%2B"), nil)
	if code != 200 {
		t.Fatalf("get: %d %s", code, out)
	}
	ans := decode[mbx.EncKeyAnswer](t, out)
	got, _, err := mbx.EncFromRelayAnswer(ans, mbx.EncAdPeer{Host: "alpha", HostPubkey: a.pub()}, r.clock.Now())
	if err != nil || got != ek.PublicKey() || ans.Sig == nil {
		t.Fatalf("answer %s → %q, %v; want the v2 key with the v1 signature beside it", out, got, err)
	}
	// An ad signed by another key is refused and changes nothing.
	bad, badSig, _ := mbx.SignEncAdV2("alpha", b.key, ek.PublicKey(), r.clock.Now(), 0)
	badPub, _ := bad.Publish(badSig)
	if code, _ := r.call(&a, "POST", "/v2/relay/enc-key", mustJSON(t, badPub)); code != http.StatusBadRequest {
		t.Fatalf("foreign ad = %d, want 400", code)
	}
	if code, _ := r.call(nil, "GET", "/v2/relay/enc-key?pubkey="+strings.ReplaceAll(b.pub(), "+", "%2B"), nil); code != http.StatusNotFound {
		t.Fatalf("lookup of a host without an ad = %d, want 404", code)
	}
}

func TestHopTampering(t *testing.T) {
	t.Parallel()
	r, a, b, _ := setup(t, nil)
	r.push(a, envItem("01KKNTQ69NA67N0QBPXKXFN501", b))
	sign := func(method, path string, body []byte) http.Header {
		return mbx.SignRelayHop(b.key, "beta", method, path, body, r.clock.Now(), true)
	}
	send := func(method, path string, h http.Header, body []byte) (int, string) {
		req, _ := http.NewRequest(method, r.ts.URL+path, strings.NewReader(string(body)))
		for k, v := range h {
			req.Header[k] = v
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var e mbx.ErrorResponse
		_ = json.NewDecoder(resp.Body).Decode(&e)
		return resp.StatusCode, e.Error
	}
	// A signature over after=0 does not cover after=99.
	h := sign("GET", "/v2/relay/items?after=0&limit=500", nil)
	if code, msg := send("GET", "/v2/relay/items?after=99&limit=500", h, nil); code != 401 || msg != "bad relay hop" {
		t.Fatalf("tampered query = %d %q, want 401 bad relay hop", code, msg)
	}
	body := []byte(`{"epoch":"` + r.srv.Epoch() + `","through":1}`)
	h = sign("POST", "/v2/relay/ack", body)
	if code, msg := send("POST", "/v2/relay/ack", h, []byte(`{"epoch":"`+r.srv.Epoch()+`","through":9}`)); code != 401 || msg != "bad relay hop" {
		t.Fatalf("tampered body = %d %q, want 401 bad relay hop", code, msg)
	}
	// Stale timestamp.
	h = mbx.SignRelayHop(b.key, "beta", "GET", "/v2/relay/items", nil, r.clock.Now().Add(-6*time.Minute), true)
	if code, _ := send("GET", "/v2/relay/items", h, nil); code != 401 {
		t.Fatalf("stale hop = %d, want 401", code)
	}
	// An unknown key that signs correctly gets what 0.5.x answers: a bad hop.
	x := newHost(t, "x", 60)
	h = mbx.SignRelayHop(x.key, "x", "GET", "/v2/relay/items", nil, r.clock.Now(), true)
	if code, msg := send("GET", "/v2/relay/items", h, nil); code != 401 || msg != "bad relay hop" {
		t.Fatalf("unknown key = %d %q, want 401 bad relay hop", code, msg)
	}
	// beta's items are still there.
	if p := r.pull(b, 0); len(p.Items) != 1 {
		t.Fatalf("after refused hops beta holds %d items, want 1", len(p.Items))
	}
}

func TestBadInputChangesNothing(t *testing.T) {
	t.Parallel()
	r, a, b, _ := setup(t, func(o *relayserver.Options) { o.MaxBody = 4096 })
	good := mbx.B64(envWire("01KKNTQ69NA67N0QBPXKXFN501", ""))
	cases := []struct {
		name string
		body string
		code int
	}{
		{"not JSON", `{"items":[`, 400},
		{"items not an array", `{"items":{}}`, 400},
		{"no items", `{"items":[]}`, 400},
		{"unknown kind", `{"items":[{"kind":"expired","item_id":"x","targets":[{"host_pubkey":"` + b.pub() + `","wire_b64":"` + good + `"}]}]}`, 400},
		{"bad base64", `{"items":[{"kind":"envelope","item_id":"01KKNTQ69NA67N0QBPXKXFN501","targets":[{"host_pubkey":"` + b.pub() + `","wire_b64":"!!!"}]}]}`, 400},
		{"bad target key", `{"items":[{"kind":"envelope","item_id":"01KKNTQ69NA67N0QBPXKXFN501","targets":[{"host_pubkey":"beta","wire_b64":"` + good + `"}]}]}`, 400},
		{"one bad item in a batch", `{"items":[{"kind":"envelope","item_id":"01KKNTQ69NA67N0QBPXKXFN501","targets":[{"host_pubkey":"` + b.pub() + `","wire_b64":"` + good + `"}]},{"kind":"memo","item_id":"y","targets":[]}]}`, 400},
		{"trailing data", `{"items":[{"kind":"envelope","item_id":"01KKNTQ69NA67N0QBPXKXFN501","targets":[{"host_pubkey":"` + b.pub() + `","wire_b64":"` + good + `"}]}]} {}`, 400},
		{"oversize body", `{"items":[{"kind":"envelope","item_id":"01KKNTQ69NA67N0QBPXKXFN501","targets":[{"host_pubkey":"` + b.pub() + `","wire_b64":"` + good + `"}]}],"pad":"` + strings.Repeat("x", 5000) + `"}`, 413},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, out := r.call(&a, "POST", "/v2/relay/items", []byte(c.body))
			if code != c.code {
				t.Fatalf("status = %d %s, want %d", code, out, c.code)
			}
			var e mbx.ErrorResponse
			if err := json.Unmarshal(out, &e); err != nil || e.Error == "" {
				t.Fatalf("error body %s is not {error}", out)
			}
			if p := r.pull(b, 0); len(p.Items) != 0 || p.HeadSeq != 0 {
				t.Fatalf("bad input stored something: %+v", p)
			}
		})
	}
	// Streamed oversize body (no Content-Length).
	req, _ := http.NewRequest("POST", r.ts.URL+"/v2/relay/items", &slowReader{n: 10000})
	req.ContentLength = -1
	for k, v := range mbx.SignRelayHop(a.key, "alpha", "POST", "/v2/relay/items", nil, r.clock.Now(), true) {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 413 {
		t.Fatalf("streamed oversize body = %d, want 413", resp.StatusCode)
	}
	// Enrolment bodies are small.
	code, _ := r.call(nil, "POST", "/v1/relay/challenge", []byte(`{"host":"x","pubkey":"`+strings.Repeat("A", 9000)+`"}`))
	if code != 413 {
		t.Fatalf("big challenge body = %d, want 413", code)
	}
}

type slowReader struct{ n int }

func (s *slowReader) Read(p []byte) (int, error) {
	if s.n <= 0 {
		return 0, io.EOF
	}
	k := min(len(p), s.n, 512)
	for i := range k {
		p[i] = ' '
	}
	s.n -= k
	return k, nil
}

func TestEpochAndBadAck(t *testing.T) {
	t.Parallel()
	r, a, b, _ := setup(t, nil)
	r.push(a, envItem("01KKNTQ69NA67N0QBPXKXFN501", b))
	code, out := r.call(&b, "GET", "/v2/relay/items?after=0&epoch=old-epoch", nil)
	e := decode[mbx.ErrorResponse](t, out)
	if code != 409 || e.Epoch != r.srv.Epoch() || e.Code != "EPOCH" {
		t.Fatalf("stale epoch pull = %d %s", code, out)
	}
	code, out = r.call(&b, "POST", "/v2/relay/ack", []byte(`{"epoch":"old-epoch","through":0}`))
	if code != 409 {
		t.Fatalf("stale epoch ack = %d %s", code, out)
	}
	head := r.pull(b, 0).HeadSeq
	code, out = r.call(&b, "POST", "/v2/relay/ack", mustJSON(t, mbx.AckRequest{Epoch: r.srv.Epoch(), Through: head + 1}))
	e = decode[mbx.ErrorResponse](t, out)
	if code != 400 || e.Code != "BAD_ACK" || e.HeadSeq == nil || *e.HeadSeq != head {
		t.Fatalf("ack beyond head = %d %s", code, out)
	}
	if p := r.pull(b, 0); len(p.Items) != 1 {
		t.Fatalf("BAD_ACK deleted items: %+v", p)
	}
}

func TestBoundedEnrolmentState(t *testing.T) {
	t.Parallel()
	r := newRelay(t, func(o *relayserver.Options) {
		o.MaxEnrolments = 2
		o.EnrolCallsPerMinute = 1000
	})
	var hs []host
	for i := range 4 {
		hs = append(hs, newHost(t, fmt.Sprintf("h%d", i), uint64(100+i)))
	}
	r.enrol(hs[0])
	r.enrol(hs[1])
	if code, out := r.tryEnrol(hs[2], ""); code != 503 {
		t.Fatalf("enrolment over the cap = %d %s, want 503", code, out)
	}
	// An enrolment over a challenge the relay never issued is refused.
	req, _ := mbx.SignEnrolment(hs[3].key, "h3", "AAAAAAAAAAAAAAAAAAAAAA", "")
	if code, out := r.call(nil, "POST", "/v1/relay/enrol", mustJSON(t, req)); code != 400 || !strings.Contains(string(out), "no pending enrolment challenge") {
		t.Fatalf("enrol without challenge = %d %s", code, out)
	}
}

func TestEnrolRateLimitPerClientAddress(t *testing.T) {
	t.Parallel()
	r := newRelay(t, func(o *relayserver.Options) {
		o.EnrolCallsPerMinute = 2
		o.TrustProxy = relayserver.TrustXFF
		o.RateTableMax = 3
	})
	h := newHost(t, "alpha", 1)
	body := mustJSON(t, mbx.ChallengeRequest{Host: h.name, Pubkey: h.pub()})
	post := func(xff string) int {
		req, _ := http.NewRequest("POST", r.ts.URL+"/v1/relay/challenge", strings.NewReader(string(body)))
		req.Header.Set("X-Forwarded-For", xff)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	// The rightmost entry is the one the trusted proxy appended; the others are the client's.
	for i, want := range []int{200, 200, 429} {
		if got := post(fmt.Sprintf("10.9.9.%d, 203.0.113.7", i)); got != want {
			t.Fatalf("call %d from 203.0.113.7 = %d, want %d", i, got, want)
		}
	}
	if got := post("203.0.113.7, 198.51.100.1"); got != 200 {
		t.Fatalf("another address = %d, want 200", got)
	}
	for i := range 10 {
		post(fmt.Sprintf("192.0.2.%d", i))
	}
	if n := r.srv.RateTableLen(); n > 3 {
		t.Fatalf("rate table holds %d addresses, cap 3", n)
	}
}

func TestPushRateLimitPerSender(t *testing.T) {
	t.Parallel()
	r, a, b, _ := setup(t, func(o *relayserver.Options) { o.PushesPerMinute = 2 })
	for i, want := range []string{"accepted", "accepted", "rejected:rate"} {
		if st := r.push(a, envItem(fmt.Sprintf("01KKNTQ69NA67N0QBPXKXFN5%02d", i), b)).Results[0].Status; st != want {
			t.Fatalf("push %d = %s, want %s", i, st, want)
		}
	}
	r.clock.Advance(time.Minute)
	if st := r.push(a, envItem("01KKNTQ69NA67N0QBPXKXFN599", b)).Results[0].Status; st != "accepted" {
		t.Fatalf("push after the window = %s", st)
	}
}

// readReceiptItem is a relay item from alpha (a) to beta (b): alpha's signed "read" receipt, seq
// 7, for message 01KKNTQ2CN9WJ3MR4Q1P12F02T to bob.
func readReceiptItem(t *testing.T, r *relay, a, b host) mbx.PushItem {
	t.Helper()
	sr, err := mbx.SignReceipt(a.key, "alpha", mbx.ReceiptInput{Msg: "01KKNTQ2CN9WJ3MR4Q1P12F02T", Agent: "bob",
		State: mbx.ReceiptRead, At: mbx.ISOTime(r.clock.Now()), Seq: 7})
	if err != nil {
		t.Fatal(err)
	}
	wire, _ := sr.Wire()
	return mbx.PushItem{Kind: "receipt", ItemID: sr.ItemID(),
		Targets: []mbx.PushTarget{{HostPubkey: b.pub(), WireB64: mbx.B64(wire)}}}
}

// announcedDefaults is what /v2/relay/info announces as limits by default: the 0.5.x defaults
// and pushes_per_minute.
func announcedDefaults() mbx.Limits {
	l := mbx.DefaultLimits()
	l.PushesPerMinute = mbx.PushesPerMinute
	return l
}

func TestReceiptItems(t *testing.T) {
	t.Parallel()
	r, a, b, _ := setup(t, nil)
	item := readReceiptItem(t, r, a, b)
	if st := r.push(a, item).Results[0].Status; st != "accepted" {
		t.Fatalf("receipt = %s", st)
	}
	wrongID := item
	wrongID.ItemID = "receipt:01KKNTQ2CN9WJ3MR4Q1P12F02T:bob@alpha:8"
	if st := r.push(a, wrongID).Results[0].Status; st != "rejected:item id is not the receipt id" {
		t.Fatalf("receipt with another id = %s", st)
	}
	// A receipt signed by another host than the pusher.
	foreign := item
	foreign.Targets = []mbx.PushTarget{{HostPubkey: a.pub(), WireB64: item.Targets[0].WireB64}}
	if st := r.push(b, foreign).Results[0].Status; st != "rejected:receipt is not signed by the sending host" {
		t.Fatalf("foreign receipt = %s", st)
	}
	plain := mbx.PushItem{Kind: "envelope", ItemID: "01KKNTQ2CN9WJ3MR4Q1P12F02T", Targets: []mbx.PushTarget{{HostPubkey: b.pub(),
		WireB64: mbx.B64([]byte(`{"v":3,"id":"01KKNTQ2CN9WJ3MR4Q1P12F02T","body":"hi","enc":null}`))}}}
	if st := r.push(a, plain).Results[0].Status; st != "rejected:envelope body is not sealed" {
		t.Fatalf("plaintext envelope = %s", st)
	}
}
