package relayserver_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

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

// zeroFiveEncAd is the 0.5.x client's start-up reading of you.enc_ad (its ensureEncAd): served is
// the decoded value (nil for null). It reports whether the client sees drift (and republishes
// both ads), and fails where the client would throw: it passes every non-null v1 to its
// fingerprint function, which takes a key string.
func zeroFiveEncAd(t *testing.T, served any, mine string, now time.Time) (drift bool) {
	t.Helper()
	if served == nil {
		return true
	}
	ad, ok := served.(map[string]any)
	if !ok {
		t.Fatalf("enc_ad %#v is neither null nor an object", served)
	}
	if v1 := ad["v1"]; v1 != nil {
		if _, ok := v1.(string); !ok {
			t.Fatalf("enc_ad.v1 = %#v: a 0.5.x client calls fingerprint() on it and throws (it must be a key string or null)", v1)
		}
	}
	exp, _ := ad["exp"].(string)
	expAt, err := mbx.ParseISOTime(exp)
	return ad["enc_pub"] != mine || ad["v1"] != mine || exp == "" || err != nil || !expAt.After(now)
}

// encAdFixture is testdata/info_enc_ad/<name>.json with the placeholders filled in, compacted.
func encAdFixture(t *testing.T, name, encPub, exp string) []byte {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "info_enc_ad", name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	raw = bytes.ReplaceAll(bytes.ReplaceAll(raw, []byte("ENC_PUB"), []byte(encPub)), []byte(`"EXP"`), []byte(strconv.Quote(exp)))
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		t.Fatalf("fixture %s: %v", name, err)
	}
	return buf.Bytes()
}

// TestInfoEncAdShapeAsZeroFiveReadsIt pins you.enc_ad byte for byte to the fixtures written from
// docs/protocol.md, through the sequence a 0.5.x host goes through (no ad, its v1 ad, its v2 ad)
// and for a host that publishes only the v2 ad (ours), and reads each answer as the 0.5.x
// client does.
func TestInfoEncAdShapeAsZeroFiveReadsIt(t *testing.T) {
	r := newRelay(t, nil)
	a, g := newHost(t, "alpha", 1), newHost(t, "gamma", 3)
	r.enrol(a)
	r.enrol(g)
	ek, err := mbx.EncKeyFromPrivate(mbx.B64(make([]byte, 32)))
	if err != nil {
		t.Fatal(err)
	}
	mine := ek.PublicKey()
	// served returns you.enc_ad as raw bytes (absent is an error) and decoded.
	served := func(h *host) ([]byte, any) {
		t.Helper()
		code, b := r.call(h, "GET", "/v2/relay/info", nil)
		if code != 200 {
			t.Fatalf("info = %d %s", code, b)
		}
		var doc struct {
			You map[string]json.RawMessage `json:"you"`
		}
		if err := json.Unmarshal(b, &doc); err != nil || doc.You == nil {
			t.Fatalf("no you block for an enrolled caller: %s", b)
		}
		raw, ok := doc.You["enc_ad"]
		if !ok {
			t.Fatalf("you.enc_ad absent: %s", b)
		}
		var v any
		if err := json.Unmarshal(raw, &v); err != nil {
			t.Fatal(err)
		}
		return raw, v
	}
	check := func(h *host, fixture, exp string, wantDrift bool) {
		t.Helper()
		raw, v := served(h)
		if want := encAdFixture(t, fixture, mine, exp); !bytes.Equal(raw, want) {
			t.Errorf("%s: you.enc_ad = %s, want %s (testdata/info_enc_ad/%s.json)", h.name, raw, want, fixture)
		}
		if got := zeroFiveEncAd(t, v, mine, r.clock.Now()); got != wantDrift {
			t.Errorf("%s, %s: a 0.5.x client sees drift %v, want %v", h.name, fixture, got, wantDrift)
		}
	}
	publishV2 := func(h host) string {
		t.Helper()
		ad, sig, err := mbx.SignEncAdV2(h.name, h.key, mine, r.clock.Now(), 0)
		if err != nil {
			t.Fatal(err)
		}
		pub, err := ad.Publish(sig)
		if err != nil {
			t.Fatal(err)
		}
		if code, out := r.call(&h, "POST", "/v2/relay/enc-key", mustJSON(t, pub)); code != 200 {
			t.Fatalf("publish v2 = %d %s", code, out)
		}
		return ad.Exp
	}
	publishV1 := func(h host) {
		t.Helper()
		_, v1sig, err := mbx.SignEncAdV1(h.name, h.key, mine)
		if err != nil {
			t.Fatal(err)
		}
		if code, out := r.call(&h, "POST", "/v1/relay/enc-key", mustJSON(t, mbx.EncAdPublishV1{EncPub: mine, Sig: v1sig})); code != 200 {
			t.Fatalf("publish v1 = %d %s", code, out)
		}
	}

	check(&a, "none", "", true)
	// A 0.5.x host's first session publishes the v2 ad, then the v1 ad. A v1 ad alone (a
	// 0.5.3-era host, or a v2 publish that failed) reads as a key, enc_pub null.
	publishV1(a)
	check(&a, "v1", "", true)
	exp := publishV2(a)
	// Its second and third sessions find both: no drift, nothing republished.
	check(&a, "both", exp, false)
	check(&a, "both", exp, false)
	// Our hosts publish the v2 ad only.
	expG := publishV2(g)
	check(&g, "v2", expG, true)

	// Our client reads every shape, and takes only a current v2 ad naming its key as held.
	for _, c := range []struct {
		h    host
		want bool
	}{{a, true}, {g, true}} {
		code, b := r.call(&c.h, "GET", "/v2/relay/info", nil)
		var info mbx.InfoResponse
		if err := json.Unmarshal(b, &info); code != 200 || err != nil || info.You == nil || !info.You.EncAdServed {
			t.Fatalf("%s: our decoding of info: %d %v %s", c.h.name, code, err, b)
		}
		if got := info.You.EncAd.Holds(mine, r.clock.Now()); got != c.want {
			t.Errorf("%s: Holds = %v, want %v", c.h.name, got, c.want)
		}
		if info.You.EncAd.Holds(mine, r.clock.Now().Add(mbx.EncAdTTL+time.Minute)) {
			t.Errorf("%s: an expired ad is taken as held", c.h.name)
		}
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
