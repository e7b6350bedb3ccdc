package relayserver_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/agentmbx/agentmbx/internal/version"
	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/relayserver"
)

// The answers as a 0.5.x client reads them: generic JSON, by field name, with JavaScript's
// notion of a missing field (absent and null alike). Where the relay adds a field 0.5.x does not
// know, the test says why it stays (0.5.x clients ignore unknown fields).

// jsObject decodes an answer body as a JavaScript client sees it.
func jsObject(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("answer is not a JSON object: %s: %v", b, err)
	}
	return m
}

func keysOf(m map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// encAdCurrent is the 0.5.x client's start-up test of you.enc_ad: the relay holds this host's enc
// key in a v2 ad (exp set) and a v1 ad too; otherwise it republishes both.
func encAdCurrent(you map[string]any, encPub string) bool {
	ad, _ := you["enc_ad"].(map[string]any)
	if ad == nil {
		return false
	}
	exp, _ := ad["exp"].(string)
	v1, _ := ad["v1"].(bool)
	return ad["enc_pub"] == encPub && exp != "" && v1
}

func TestInfoEncAdShapeAsZeroFiveReadsIt(t *testing.T) {
	r := newRelay(t, nil)
	a := newHost(t, "alpha", 1)
	r.enrol(a)
	ek, err := mbx.EncKeyFromPrivate(mbx.B64(make([]byte, 32)))
	if err != nil {
		t.Fatal(err)
	}
	you := func() map[string]any {
		t.Helper()
		code, b := r.call(&a, "GET", "/v2/relay/info", nil)
		if code != 200 {
			t.Fatalf("info = %d %s", code, b)
		}
		y, _ := jsObject(t, b)["you"].(map[string]any)
		if y == nil {
			t.Fatalf("no you block for an enrolled caller: %s", b)
		}
		return y
	}

	y := you()
	if v, ok := y["enc_ad"]; !ok || v != nil {
		t.Fatalf("before any ad: enc_ad = %#v (present %v), want null", v, ok)
	}
	if encAdCurrent(y, ek.PublicKey()) {
		t.Fatal("a client would take a missing ad as current")
	}

	ad, sig, err := mbx.SignEncAdV2("alpha", a.key, ek.PublicKey(), r.clock.Now(), 0)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := ad.Publish(sig)
	if err != nil {
		t.Fatal(err)
	}
	if code, out := r.call(&a, "POST", "/v2/relay/enc-key", mustJSON(t, pub)); code != 200 {
		t.Fatalf("publish v2 = %d %s", code, out)
	}
	got, _ := you()["enc_ad"].(map[string]any)
	if want := []string{"enc_pub", "exp", "v1"}; !slices.Equal(keysOf(got), want) {
		t.Fatalf("enc_ad fields %v, want exactly %v", keysOf(got), want)
	}
	if got["enc_pub"] != ek.PublicKey() || got["exp"] != ad.Exp || got["v1"] != false {
		t.Fatalf("after the v2 ad: enc_ad = %v, want enc_pub %s, exp %s, v1 false", got, ek.PublicKey(), ad.Exp)
	}
	if encAdCurrent(you(), ek.PublicKey()) {
		t.Fatal("without a v1 ad a 0.5.x client must republish (its v1 peers look it up by name)")
	}

	_, v1sig, err := mbx.SignEncAdV1("alpha", a.key, ek.PublicKey())
	if err != nil {
		t.Fatal(err)
	}
	if code, out := r.call(&a, "POST", "/v1/relay/enc-key", mustJSON(t, mbx.EncAdPublishV1{EncPub: ek.PublicKey(), Sig: v1sig})); code != 200 {
		t.Fatalf("publish v1 = %d %s", code, out)
	}
	if y := you(); !encAdCurrent(y, ek.PublicKey()) {
		t.Fatalf("with both ads held a 0.5.x client would still republish: %v", y["enc_ad"])
	}
	other, _ := mbx.EncKeyFromPrivate(mbx.B64(append(make([]byte, 31), 9)))
	if encAdCurrent(you(), other.PublicKey()) {
		t.Fatal("an ad for another enc key is taken as current")
	}
}

func TestUnknownKeyIsABadHopAsZeroFiveSays(t *testing.T) {
	r := newRelay(t, nil)
	x := newHost(t, "stranger", 61)
	for _, c := range []struct{ method, path, body string }{
		{"GET", "/v2/relay/items?after=0", ""},
		{"POST", "/v2/relay/ack", `{"through":0}`},
		{"POST", "/v2/relay/enc-key", `{"enc_pub":"x","sig":"y"}`},
	} {
		code, b := r.call(&x, c.method, c.path, []byte(c.body))
		m := jsObject(t, b)
		if code != http.StatusUnauthorized || m["error"] != "bad relay hop" || len(m) != 1 {
			t.Errorf("%s %s by a never-enrolled key = %d %s, want 401 {\"error\":\"bad relay hop\"}", c.method, c.path, code, b)
		}
	}
}

func TestEpochAndAckAnswersAsZeroFiveReadsThem(t *testing.T) {
	r := newRelay(t, nil)
	a, b := newHost(t, "alpha", 1), newHost(t, "beta", 2)
	r.enrol(a)
	r.enrol(b)
	r.push(a, envItem("01JQ0000000000000000000001", b), envItem("01JQ0000000000000000000002", b))
	head := r.pull(b, 0).HeadSeq
	epoch := r.srv.Epoch()

	// Stale pull: 409 {error, epoch} as 0.5.x, plus code "EPOCH" (kept: 0.5.x reads epoch and
	// ignores code; our client tells a stale epoch from other conflicts by it).
	code, out := r.call(&b, "GET", "/v2/relay/items?after=0&epoch=old", nil)
	m := jsObject(t, out)
	if code != http.StatusConflict || m["epoch"] != epoch || m["code"] != mbx.CodeEpoch || m["error"] == nil {
		t.Fatalf("stale pull = %d %s, want 409 with epoch %s", code, out, epoch)
	}

	// Stale ack: 409 {error, epoch, head_seq} as 0.5.x.
	code, out = r.call(&b, "POST", "/v2/relay/ack", []byte(`{"epoch":"old","through":1}`))
	m = jsObject(t, out)
	if code != http.StatusConflict || m["epoch"] != epoch || m["head_seq"] != float64(head) {
		t.Fatalf("stale ack = %d %s, want 409 with epoch %s and head_seq %d", code, out, epoch, head)
	}

	// An ack past the head: 400 {code:"BAD_ACK", epoch, head_seq} as 0.5.x, nothing deleted.
	code, out = r.call(&b, "POST", "/v2/relay/ack", []byte(`{"epoch":"`+epoch+`","through":`+jsonInt(head+5)+`}`))
	m = jsObject(t, out)
	if code != http.StatusBadRequest || m["code"] != mbx.CodeBadAck || m["epoch"] != epoch || m["head_seq"] != float64(head) {
		t.Fatalf("ack past the head = %d %s, want 400 BAD_ACK with epoch and head_seq %d", code, out, head)
	}
	if p := r.pull(b, 0); len(p.Items) != 2 {
		t.Fatalf("a refused ack deleted items: %d left", len(p.Items))
	}
}

func jsonInt(n int64) string { b, _ := json.Marshal(n); return string(b) }

func TestInfoVersionAndLimitsAsZeroFiveReadsThem(t *testing.T) {
	r := newRelay(t, func(o *relayserver.Options) { o.Version = "" }) // the default, as relay serve runs it
	code, out := r.call(nil, "GET", "/v2/relay/info", nil)
	if code != 200 {
		t.Fatalf("info = %d %s", code, out)
	}
	m := jsObject(t, out)
	// The real build's version (module version or make build's stamp), never a made-up one.
	if v, _ := m["version"].(string); v != version.String() || v == "" || strings.Contains(v, "0.1.0-dev") {
		t.Errorf("version %q, want the build's %q", v, version.String())
	}
	if _, ok := m["you"]; ok {
		t.Error("an unsigned info names a caller")
	}
	limits, _ := m["limits"].(map[string]any)
	for _, k := range []string{"max_item_bytes", "max_batch", "max_pull", "max_pull_bytes", "max_targets", "retention_days",
		"max_queue_items", "max_queue_bytes", "max_sender_items", "max_sender_bytes", "max_owner_items", "max_owner_bytes"} {
		if n, ok := limits[k].(float64); !ok || n <= 0 {
			t.Errorf("limits.%s = %v, want a positive number as 0.5.x serves it", k, limits[k])
		}
	}
	// max_wait is ours (the long-poll cap); 0.5.x clients ignore it and never send wait.
	if n, ok := limits["max_wait"].(float64); !ok || n <= 0 {
		t.Errorf("limits.max_wait = %v", limits["max_wait"])
	}
	// pushes_per_minute is ours too: the push budget hosts pace themselves under.
	if n, _ := limits["pushes_per_minute"].(float64); n != mbx.PushesPerMinute {
		t.Errorf("limits.pushes_per_minute = %v, want %d", limits["pushes_per_minute"], mbx.PushesPerMinute)
	}
}
