package relayserver_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/relayserver"
)

// The v1 endpoints as a 0.5.x v1 client calls them: hops by name (no x-mbx-key) over the
// pathname, envelopes as JSON objects, answers read by field name.

// callV1 sends a request signed as a v1 hop by h (by name, the pathname signed).
func (r *relay) callV1(h host, method, path string, body []byte) (int, []byte) {
	r.t.Helper()
	req, err := http.NewRequest(method, r.ts.URL+path, strings.NewReader(string(body)))
	if err != nil {
		r.t.Fatal(err)
	}
	u, _ := url.Parse(path)
	for k, v := range mbx.SignRelayHop(h.key, h.name, method, u.EscapedPath(), body, r.clock.Now(), false) {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		r.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		r.t.Fatal(err)
	}
	return resp.StatusCode, b
}

// v1Env is a sealed envelope object as a 0.5.x client pushes it.
func v1Env(id string, to ...string) json.RawMessage {
	toJSON, _ := json.Marshal(to)
	return json.RawMessage(fmt.Sprintf(`{"v":3,"id":%q,"from":"alice@alpha","to":%s,"body":"c2VhbGVk","enc":{"v":1,"alg":"x25519+xchacha20poly1305","body":"c2VhbGVk"}}`, id, toJSON))
}

type v1PushAnswer struct {
	Stored int     `json:"stored"`
	Error  *string `json:"error"`
}

type v1PullAnswer struct {
	Items []struct {
		Seq      int64           `json:"seq"`
		Envelope json.RawMessage `json:"envelope"`
		From     string          `json:"from"`
	} `json:"items"`
	Cursor *int64 `json:"cursor"`
}

func (r *relay) v1Push(h host, envs ...json.RawMessage) (int, v1PushAnswer) {
	r.t.Helper()
	code, b := r.callV1(h, "POST", "/v1/relay/messages", mustJSON(r.t, map[string]any{"envelopes": envs}))
	return code, decode[v1PushAnswer](r.t, b)
}

func (r *relay) v1Pull(h host, after int64) v1PullAnswer {
	r.t.Helper()
	code, b := r.callV1(h, "GET", fmt.Sprintf("/v1/relay/messages?after=%d", after), nil)
	if code != 200 {
		r.t.Fatalf("v1 pull by %s = %d %s", h.name, code, b)
	}
	p := decode[v1PullAnswer](r.t, b)
	if p.Cursor == nil || p.Items == nil {
		r.t.Fatalf("v1 pull answer lacks items or cursor: %s", b)
	}
	return p
}

func errText(p v1PushAnswer) string {
	if p.Error == nil {
		return ""
	}
	return *p.Error
}

func TestV1PushPullAck(t *testing.T) {
	t.Parallel()
	r, a, b, _ := setup(t, nil)
	env := v1Env("01JQV1000000000000000000A1", "bob@beta", "carol@beta")
	code, res := r.v1Push(a, env)
	if code != 200 || res.Stored != 1 || res.Error != nil {
		t.Fatalf("v1 push = %d %+v, want 200 stored 1", code, res)
	}
	// A retry (v1 senders reseal, so other bytes) counts as stored and stores nothing new.
	if code, res := r.v1Push(a, json.RawMessage(strings.Replace(string(env), "c2VhbGVk", "b3RoZXI=", 1))); code != 200 || res.Stored != 1 {
		t.Fatalf("v1 retry = %d %+v, want 200 stored 1", code, res)
	}
	p := r.v1Pull(b, 0)
	if len(p.Items) != 1 || p.Items[0].From != "alpha" || *p.Cursor != p.Items[0].Seq {
		t.Fatalf("v1 pull = %+v, want the one envelope from alpha, cursor at its seq", p)
	}
	var got, want any
	if json.Unmarshal(p.Items[0].Envelope, &got) != nil || json.Unmarshal(env, &want) != nil || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("pulled envelope %s, want %s", p.Items[0].Envelope, env)
	}
	// A v2 receiver of the same queue sees the same item (mixed hosts share one queue).
	if v2 := r.pull(b, 0); len(v2.Items) != 1 || v2.Items[0].ItemID != "01JQV1000000000000000000A1" {
		t.Fatalf("v2 pull of the v1 item = %+v", v2)
	}
	// Ack past the head is cut to the head; everything is gone after.
	if code, out := r.callV1(b, "POST", "/v1/relay/ack", []byte(fmt.Sprintf(`{"cursor":%d}`, *p.Cursor+1000))); code != 200 || decode[map[string]any](t, out)["ok"] != true {
		t.Fatalf("v1 ack = %d %s", code, out)
	}
	if p := r.v1Pull(b, 0); len(p.Items) != 0 || *p.Cursor == 0 {
		t.Fatalf("after the ack: %+v", p)
	}
	if h := r.pull(b, 0); h.HeadSeq == 0 || len(h.Items) != 0 {
		t.Fatalf("v2 view after the v1 ack: %+v", h)
	}
}

func TestV1PushRefusals(t *testing.T) {
	t.Parallel()
	r, a, b, _ := setup(t, nil)
	for _, c := range []struct {
		name string
		env  json.RawMessage
		want string
	}{
		{"unknown host", v1Env("01JQV1000000000000000000B1", "x@nowhere"), "recipient host not enrolled: nowhere"},
		{"no host part", v1Env("01JQV1000000000000000000B2", "bob"), "recipient host not enrolled"},
		{"unsealed", json.RawMessage(`{"v":3,"id":"01JQV1000000000000000000B3","to":["bob@beta"],"body":"plain","enc":null}`), relayserver.RejectNotSealed},
		{"not an object", json.RawMessage(`"x"`), "bad envelope"},
	} {
		code, res := r.v1Push(a, c.env)
		if code != http.StatusRequestEntityTooLarge || res.Stored != 0 || !strings.Contains(errText(res), c.want) {
			t.Errorf("%s: %d %+v, want 413 stored 0 error %q", c.name, code, res, c.want)
		}
	}
	// A batch stores in order up to the first refusal: a partial 200.
	code, res := r.v1Push(a, v1Env("01JQV1000000000000000000B4", "bob@beta"), v1Env("01JQV1000000000000000000B5", "x@nowhere"), v1Env("01JQV1000000000000000000B6", "bob@beta"))
	if code != 200 || res.Stored != 1 || !strings.Contains(errText(res), "nowhere") {
		t.Fatalf("partial batch = %d %+v", code, res)
	}
	if p := r.v1Pull(b, 0); len(p.Items) != 1 {
		t.Fatalf("beta holds %d items, want only the one before the refusal", len(p.Items))
	}
	// A bad body is a 400, as for v2.
	if code, out := r.callV1(a, "POST", "/v1/relay/messages", []byte(`{"items":[]}`)); code != 400 {
		t.Fatalf("body without envelopes = %d %s", code, out)
	}
}

func TestV1AllowlistAndQuota(t *testing.T) {
	t.Parallel()
	r, a, b, g := setup(t, func(o *relayserver.Options) { o.Limits = mbx.DefaultLimits(); o.Limits.MaxSenderItems = 1 })
	// beta accepts gamma only.
	list, sig, err := mbx.SignSenderList(b.key, []string{g.pub()}, r.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := list.Publish(sig)
	if code, out := r.call(&b, "POST", "/v2/relay/senders", mustJSON(t, pub)); code != 200 {
		t.Fatalf("senders: %d %s", code, out)
	}
	if code, res := r.v1Push(a, v1Env("01JQV1000000000000000000C1", "bob@beta")); code != 413 || errText(res) != "sender not accepted by beta" {
		t.Fatalf("push from a sender beta does not accept = %d %+v", code, res)
	}
	// gamma's share of beta's queue is one item.
	if code, res := r.v1Push(g, v1Env("01JQV1000000000000000000C2", "bob@beta")); code != 200 || res.Stored != 1 {
		t.Fatalf("first push from gamma = %d %+v", code, res)
	}
	code, res := r.v1Push(g, v1Env("01JQV1000000000000000000C3", "bob@beta"))
	if code != 413 || !strings.Contains(errText(res), relayserver.RejectSenderItems) {
		t.Fatalf("push over gamma's share = %d %+v, want %s", code, res, relayserver.RejectSenderItems)
	}
}

func TestV1PullBounds(t *testing.T) {
	t.Parallel()
	r, a, b, _ := setup(t, func(o *relayserver.Options) { o.Limits = mbx.DefaultLimits(); o.Limits.MaxPull = 2 })
	for i := range 5 {
		if code, res := r.v1Push(a, v1Env(fmt.Sprintf("01JQV1000000000000000000D%d", i), "bob@beta")); code != 200 || res.Stored != 1 {
			t.Fatalf("push %d = %d %+v", i, code, res)
		}
	}
	var seen int
	var after int64
	for range 5 {
		p := r.v1Pull(b, after)
		if len(p.Items) > 2 {
			t.Fatalf("a v1 page of %d items, max_pull is 2", len(p.Items))
		}
		seen += len(p.Items)
		if len(p.Items) > 0 && *p.Cursor != p.Items[len(p.Items)-1].Seq {
			t.Fatalf("cursor %d is not the page's last seq %d", *p.Cursor, p.Items[len(p.Items)-1].Seq)
		}
		if *p.Cursor == after {
			break
		}
		after = *p.Cursor
	}
	if seen != 5 {
		t.Fatalf("pulled %d envelopes in pages, want 5", seen)
	}
}

// TestV1NameLookups: a name resolves only for one live enrolment; two hosts of one name, and a
// crowded name, are ambiguous for pushes, hops and enc-key lookups alike.
func TestV1NameLookups(t *testing.T) {
	t.Parallel()
	r, a, _, _ := setup(t, func(o *relayserver.Options) { o.EnrolCallsPerMinute, o.NewEnrolmentsPerDay = -1, -1 })
	twin1, twin2 := newHost(t, "twin", 70), newHost(t, "twin", 71)
	r.enrol(twin1)
	r.enrol(twin2)
	code, res := r.v1Push(a, v1Env("01JQV1000000000000000000E1", "bob@twin"))
	if code != 413 || !strings.Contains(errText(res), "recipient host ambiguous: twin") {
		t.Fatalf("push to an ambiguous name = %d %+v", code, res)
	}
	for _, h := range []host{twin1, twin2} {
		if p := r.pull(h, 0); len(p.Items) != 0 {
			t.Fatalf("an ambiguous push stored an item for %s", h.pub())
		}
	}
	// A v1 hop by an ambiguous (not crowded) name: the signature picks the enrolment.
	if code, out := r.callV1(twin2, "GET", "/v1/relay/messages?after=0", nil); code != 200 {
		t.Fatalf("v1 pull by one of two twins = %d %s", code, out)
	}
	if code, _ := r.call(nil, "GET", "/v1/relay/enc-key?host=twin", nil); code != 404 {
		t.Fatalf("enc-key lookup of an ambiguous name = %d, want 404", code)
	}

	crowd := make([]host, mbx.MaxEnrolmentsPerName+1)
	for i := range crowd {
		crowd[i] = newHost(t, "crowd", uint64(100+i))
		r.enrol(crowd[i])
	}
	if code, res := r.v1Push(a, v1Env("01JQV1000000000000000000E2", "bob@crowd")); code != 413 || !strings.Contains(errText(res), "ambiguous") {
		t.Fatalf("push to a crowded name = %d %+v", code, res)
	}
	if code, out := r.callV1(crowd[0], "GET", "/v1/relay/messages?after=0", nil); code != 401 || decode[mbx.ErrorResponse](t, out).Error != "bad relay hop" {
		t.Fatalf("v1 hop by a crowded name = %d %s, want 401 bad relay hop", code, out)
	}
	// v2 by key still works for every one of them.
	if p := r.pull(crowd[0], 0); p.HeadSeq != 0 {
		t.Fatalf("crowded host's v2 pull = %+v", p)
	}
}

func TestV1EncKey(t *testing.T) {
	t.Parallel()
	r, a, _, _ := setup(t, nil)
	ek, err := mbx.EncKeyFromPrivate(mbx.B64(append(make([]byte, 31), 5)))
	if err != nil {
		t.Fatal(err)
	}
	_, sig, err := mbx.SignEncAdV1("alpha", a.key, ek.PublicKey())
	if err != nil {
		t.Fatal(err)
	}
	if code, out := r.callV1(a, "POST", "/v1/relay/enc-key", mustJSON(t, mbx.EncAdPublishV1{EncPub: ek.PublicKey(), Sig: sig})); code != 200 {
		t.Fatalf("v1 enc-key publish = %d %s", code, out)
	}
	code, out := r.call(nil, "GET", "/v1/relay/enc-key?host=alpha", nil)
	m := map[string]any{}
	if code != 200 || json.Unmarshal(out, &m) != nil || m["enc_pub"] != ek.PublicKey() || m["sig"] != sig {
		t.Fatalf("v1 enc-key lookup = %d %s", code, out)
	}
	if code, _ := r.call(nil, "GET", "/v1/relay/enc-key?host=nobody", nil); code != 404 {
		t.Fatalf("lookup of an unknown name = %d", code)
	}
}

// TestV1FanOut: an envelope for two hosts is stored for both or, over max_targets, for neither.
func TestV1FanOut(t *testing.T) {
	t.Parallel()
	r, a, b, g := setup(t, nil)
	if code, res := r.v1Push(a, v1Env("01JQV1000000000000000000F1", "bob@beta", "dave@gamma", "carol@BETA")); code != 200 || res.Stored != 1 {
		t.Fatalf("fan-out push = %d %+v", code, res)
	}
	for _, h := range []host{b, g} {
		if p := r.v1Pull(h, 0); len(p.Items) != 1 {
			t.Fatalf("%s holds %d items, want 1", h.name, len(p.Items))
		}
	}
	r2, a2, b2, g2 := setup(t, func(o *relayserver.Options) { o.Limits = mbx.DefaultLimits(); o.Limits.MaxTargets = 1 })
	if code, res := r2.v1Push(a2, v1Env("01JQV1000000000000000000F2", "bob@beta", "dave@gamma")); code != 413 || !strings.Contains(errText(res), "too many recipient hosts") {
		t.Fatalf("push over max_targets = %d %+v", code, res)
	}
	for _, h := range []host{b2, g2} {
		if p := r2.v1Pull(h, 0); len(p.Items) != 0 {
			t.Fatalf("a refused fan-out stored an item for %s", h.name)
		}
	}
}

// Issue 25, finding 7 (interop): a v1-pushed envelope expires after retention as a v2 item does,
// as 0.5.11's relay does (its v1 push stores expires_at = accepted + retention and its sweep is
// kind-blind); the sender gets the signed notice on v2, and a v1 pull never shows it.
func TestV1ItemsExpireLike0511(t *testing.T) {
	t.Parallel()
	r, a, b, _ := setup(t, nil)
	const id = "01KKNTQ2CN9WJ3MR4Q1P12F0V1"
	if code, ans := r.v1Push(a, v1Env(id, "bob@beta")); code != 200 || ans.Stored != 1 {
		t.Fatalf("v1 push = %d %+v", code, ans)
	}
	r.clock.Advance(14*day - time.Millisecond)
	if rep := r.sweep(); expiredCount(rep) != 0 {
		t.Fatalf("sweep before retention = %+v, want nothing expired", rep)
	}
	if p := r.v1Pull(b, 0); len(p.Items) != 1 {
		t.Fatalf("beta's v1 pull before retention = %d items, want 1", len(p.Items))
	}
	r.clock.Advance(time.Millisecond)
	if rep := r.sweep(); rep.Expired.Envelope != 1 || rep.Notices != 1 {
		t.Fatalf("sweep at retention = %+v, want the v1 envelope expired and its sender told", rep)
	}
	if p := r.v1Pull(b, 0); len(p.Items) != 0 {
		t.Fatalf("beta's v1 pull after retention = %d items, want none", len(p.Items))
	}
	if p := r.v1Pull(a, 0); len(p.Items) != 0 {
		t.Fatalf("alpha's v1 pull shows %d items, want none (the notice is not an envelope)", len(p.Items))
	}
	if p := r.pull(a, 0); len(p.Items) != 1 || p.Items[0].Kind != "expired" || p.Items[0].ItemID != mbx.ExpiryNoticeItemID(id, b.pub()) {
		t.Fatalf("alpha's v2 pull = %+v, want the expiry notice", p.Items)
	}
}
