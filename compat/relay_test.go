package compat_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/relayserver"
	"github.com/agentmbx/agentmbx/relayserver/relaytest"
)

// What our relay serves, checked document by document against the shapes, driven the way a
// 0.5.x host drives a relay (its own hop signing and records, sealed envelopes and a receipt
// from the 0.5.x test vectors).

// vectorCase is one case of a vector file in mbx/testdata/vectors/agentmbx-0.5 (data produced
// by the 0.5.x implementation).
func vectorCase(t *testing.T, file, name string) map[string]any {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "mbx", "testdata", "vectors", "agentmbx-0.5", file))
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Cases []map[string]any `json:"cases"`
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		t.Fatal(err)
	}
	for _, c := range f.Cases {
		if c["name"] == name {
			return c
		}
	}
	t.Fatalf("%s has no case %q", file, name)
	return nil
}

func seedOf(t *testing.T, c map[string]any, field string) []byte {
	t.Helper()
	s, _ := c[field].(string)
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil || len(b) != 32 {
		t.Fatalf("%s: %v", field, err)
	}
	return b
}

// ourRelay is our relay in this process, on a clock the test moves.
type ourRelay struct {
	t   *testing.T
	r   *relaytest.Relay
	now atomic.Int64 // ms
}

func startOurRelay(t *testing.T) *ourRelay {
	t.Helper()
	o := &ourRelay{t: t}
	o.now.Store(time.Date(2026, 10, 2, 10, 0, 0, 0, time.UTC).UnixMilli())
	o.r = relaytest.Start(t, 26, relayserver.Options{Clock: o.clock, EnrolCallsPerMinute: -1, PushesPerMinute: -1})
	return o
}

func (o *ourRelay) clock() time.Time { return time.UnixMilli(o.now.Load()).UTC() }

func (o *ourRelay) advance(d time.Duration) { o.now.Add(d.Milliseconds()) }

// call sends a request: signed by p (v2 or v1 hop) unless p is nil.
func (o *ourRelay) call(p *party, v2 bool, method, pathQuery string, body []byte) (int, []byte) {
	o.t.Helper()
	req, err := http.NewRequest(method, o.r.URL+pathQuery, bytes.NewReader(body))
	if err != nil {
		o.t.Fatal(err)
	}
	if p != nil {
		req.Header = p.hop(method, pathQuery, body, o.clock(), v2)
	} else if body != nil {
		req.Header.Set("content-type", "application/json")
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		o.t.Fatalf("%s %s: %v", method, pathQuery, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		o.t.Fatal(err)
	}
	return res.StatusCode, b
}

// expect calls and checks the status and the answer's shape; it returns the decoded answer.
func (o *ourRelay) expect(p *party, v2 bool, method, pathQuery string, body any, status int, shape string) map[string]any {
	o.t.Helper()
	var raw []byte
	if body != nil {
		raw = jsonOf(o.t, body)
	}
	code, b := o.call(p, v2, method, pathQuery, raw)
	if code != status {
		o.t.Fatalf("%s %s = %d %s, want %d", method, pathQuery, code, b, status)
	}
	return checkDoc(o.t, shape, b)
}

func jsonOf(t *testing.T, v any) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return bytes.TrimSpace(buf.Bytes())
}

// enrol runs the challenge and the enrolment as 0.5.x does.
func (o *ourRelay) enrol(p party) {
	o.t.Helper()
	req := map[string]any{"host": p.host, "pubkey": p.pub}
	checkDoc(o.t, "challenge_request", jsonOf(o.t, req))
	ch := o.expect(nil, false, "POST", "/v1/relay/challenge", req, 200, "challenge_answer")
	sig := p.sign(canonical(map[string]any{"v": 1, "challenge": ch["challenge"], "host": p.host, "pubkey": p.pub, "owner_fp": ""}))
	er := map[string]any{"host": p.host, "pubkey": p.pub, "owner_fp": "", "sig": sig}
	checkDoc(o.t, "enrol_request", jsonOf(o.t, er))
	o.expect(nil, false, "POST", "/v1/relay/enrol", er, 200, "ok_answer")
}

func TestOurRelayServesTheShapes(t *testing.T) {
	o := startOurRelay(t)
	envCase := vectorCase(t, "envelope.json", "simple message")
	recCase := vectorCase(t, "receipt.json", "delivered")
	alpha := partyFromSeed("alpha", seedOf(t, envCase, "sender_seed_b64"))
	beta := partyFromSeed("beta", seedOf(t, recCase, "signer_seed_b64"))
	stranger := newParty("stranger", 9)
	target := envCase["targets"].([]any)[0].(map[string]any)
	wire := []byte(target["wire"].(string))
	if target["recipient_host_pubkey"] != beta.pub {
		t.Fatal("the vectors' beta is not the receipt's signer")
	}
	var env struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(wire, &env); err != nil {
		t.Fatal(err)
	}

	info := o.expect(nil, false, "GET", "/v2/relay/info", nil, 200, "info")
	if _, ok := info["you"]; ok {
		t.Error("an unsigned info has a you block")
	}
	o.expect(&stranger, true, "GET", "/v2/relay/items?after=0", nil, 401, "bad_hop")
	o.enrol(alpha)
	o.enrol(beta)
	info = o.expect(&alpha, true, "GET", "/v2/relay/info", nil, 200, "info")
	if you, _ := info["you"].(map[string]any); you == nil || you["enc_ad"] != nil {
		t.Fatalf("signed info before any ad: you = %v, want enc_ad null", info["you"])
	}

	// alpha's ads, v2 then v1, as a 0.5.x host publishes them.
	now := o.clock()
	encPub := target["recipient_enc_public_key"].(string) // any 32-byte key will do
	ad := map[string]any{"v": 2, "type": "enc-ad", "host": "alpha", "host_pubkey": alpha.pub, "enc_pub": encPub,
		"iat": isoMs(now), "exp": isoMs(now.Add(30 * 24 * time.Hour))}
	adReq := map[string]any{"ad": ad, "sig": alpha.sign(canonical(ad))}
	checkDoc(t, "enc_key_request", jsonOf(t, adReq))
	o.expect(&alpha, true, "POST", "/v2/relay/enc-key", adReq, 200, "ok_answer")
	v1Req := map[string]any{"enc_pub": encPub, "sig": alpha.sign(canonical(map[string]any{"v": 1, "host": "alpha", "enc_pub": encPub}))}
	checkDoc(t, "enc_key_v1_request", jsonOf(t, v1Req))
	o.expect(&alpha, false, "POST", "/v1/relay/enc-key", v1Req, 200, "ok_answer")
	info = o.expect(&alpha, true, "GET", "/v2/relay/info", nil, 200, "info")
	if you := info["you"].(map[string]any); you["enc_ad"].(map[string]any)["v1"] != encPub {
		t.Fatalf("enc_ad with both ads = %v", you["enc_ad"])
	}
	got := o.expect(&beta, true, "GET", "/v2/relay/enc-key?pubkey="+url.QueryEscape(alpha.pub), nil, 200, "enc_key_answer")
	if got["sig"] == nil || got["ad"] == nil || got["enc_pub"] != encPub {
		t.Fatalf("enc-key answer = %v", got)
	}
	o.expect(&beta, false, "GET", "/v1/relay/enc-key?host=alpha", nil, 200, "enc_key_answer")
	o.expect(&beta, true, "GET", "/v2/relay/enc-key?pubkey="+url.QueryEscape(stranger.pub), nil, 404, "error")

	// beta accepts alpha only.
	list := map[string]any{"v": 1, "type": "relay-senders", "host_pubkey": beta.pub, "senders": []any{alpha.pub}, "iat": isoMs(now)}
	sr := map[string]any{"list": list, "sig": beta.sign(canonical(list))}
	checkDoc(t, "senders_request", jsonOf(t, sr))
	o.expect(&beta, true, "POST", "/v2/relay/senders", sr, 200, "ok_answer")
	o.expect(&beta, true, "POST", "/v2/relay/senders", sr, 409, "error")

	// Push: accepted, then a duplicate, and a rejected item in the same batch.
	push := map[string]any{"items": []any{
		map[string]any{"kind": "envelope", "item_id": env.ID, "targets": []any{map[string]any{"host_pubkey": beta.pub, "wire_b64": b64(wire)}}},
		map[string]any{"kind": "envelope", "item_id": "not-the-id", "targets": []any{map[string]any{"host_pubkey": beta.pub, "wire_b64": b64(wire)}}},
	}}
	checkDoc(t, "push_request", jsonOf(t, push))
	res := o.expect(&alpha, true, "POST", "/v2/relay/items", push, 200, "push_answer")["results"].([]any)
	first, second := res[0].(map[string]any), res[1].(map[string]any)
	if first["status"] != "accepted" || first["accept"] == nil || first["sig"] == nil {
		t.Fatalf("first result = %v", first)
	}
	if st, _ := second["status"].(string); st[:9] != "rejected:" || second["accept"] != nil || len(second["targets"].([]any)) != 0 {
		t.Fatalf("rejected result = %v, want targets [] and no accept", second)
	}
	if a := first["accept"].(map[string]any); a["targets"].([]any)[0].(map[string]any)["wire_hash"] != sha256hex(wire) {
		t.Fatalf("wire_hash of %v", a)
	}
	res = o.expect(&alpha, true, "POST", "/v2/relay/items", push, 200, "push_answer")["results"].([]any)
	if res[0].(map[string]any)["status"] != "duplicate" {
		t.Fatalf("repeat = %v", res[0])
	}
	// beta's receipt for it goes back to alpha.
	recWire := []byte(recCase["wire"].(string))
	rp := map[string]any{"items": []any{map[string]any{"kind": "receipt", "item_id": recCase["item_id"],
		"targets": []any{map[string]any{"host_pubkey": alpha.pub, "wire_b64": b64(recWire)}}}}}
	checkDoc(t, "push_request", jsonOf(t, rp))
	if r := o.expect(&beta, true, "POST", "/v2/relay/items", rp, 200, "push_answer")["results"].([]any)[0].(map[string]any); r["status"] != "accepted" {
		t.Fatalf("receipt push = %v", r)
	}

	// Pull and ack, and the error answers around them.
	page := o.expect(&beta, true, "GET", "/v2/relay/items?after=0&limit=500", nil, 200, "pull_answer")
	items := page["items"].([]any)
	if len(items) != 1 {
		t.Fatalf("beta's page = %v", page)
	}
	if w, _ := base64.StdEncoding.DecodeString(items[0].(map[string]any)["wire_b64"].(string)); !bytes.Equal(w, wire) {
		t.Fatal("the pulled wire is not the pushed bytes")
	}
	o.expect(&alpha, true, "GET", "/v2/relay/items?after=0", nil, 200, "pull_answer")
	epoch := page["epoch"].(string)
	head, _ := strconv.ParseInt(string(page["head_seq"].(json.Number)), 10, 64)
	ack := map[string]any{"epoch": epoch, "through": head}
	checkDoc(t, "ack_request", jsonOf(t, ack))
	o.expect(&beta, true, "POST", "/v2/relay/ack", ack, 200, "ack_answer")
	o.expect(&beta, true, "GET", "/v2/relay/items?after=0&epoch=stale", nil, 409, "error")
	o.expect(&beta, true, "POST", "/v2/relay/ack", map[string]any{"epoch": "stale", "through": 1}, 409, "error")
	bad := o.expect(&beta, true, "POST", "/v2/relay/ack", map[string]any{"epoch": epoch, "through": head + 5}, 400, "error")
	if bad["code"] != "BAD_ACK" || bad["epoch"] != epoch || bad["head_seq"] == nil {
		t.Fatalf("BAD_ACK answer = %v", bad)
	}

	// v1: a push by name, a pull and an ack.
	var envObj map[string]any
	if err := json.Unmarshal(wire, &envObj); err != nil {
		t.Fatal(err)
	}
	v1p := map[string]any{"envelopes": []any{envObj}}
	checkDoc(t, "v1_push_request", jsonOf(t, v1p))
	if got := o.expect(&alpha, false, "POST", "/v1/relay/messages", v1p, 200, "v1_push_answer"); got["stored"] != json.Number("1") {
		t.Fatalf("v1 push = %v", got)
	}
	v1page := o.expect(&alpha, false, "GET", "/v1/relay/messages?after=0", nil, 200, "v1_pull_answer")
	cursor, _ := strconv.ParseInt(string(v1page["cursor"].(json.Number)), 10, 64)
	v1ack := map[string]any{"cursor": cursor}
	checkDoc(t, "v1_ack_request", jsonOf(t, v1ack))
	o.expect(&alpha, false, "POST", "/v1/relay/ack", v1ack, 200, "ok_answer")
	o.expect(&stranger, false, "POST", "/v1/relay/messages", v1p, 401, "bad_hop")

	// An item that expires undelivered becomes an expiry notice for its sender.
	gamma := newParty("gamma", 3)
	o.enrol(gamma)
	late := map[string]any{"items": []any{map[string]any{"kind": "envelope", "item_id": env.ID,
		"targets": []any{map[string]any{"host_pubkey": gamma.pub, "wire_b64": b64(wire)}}}}}
	o.expect(&alpha, true, "POST", "/v2/relay/items", late, 200, "push_answer")
	o.advance(15 * 24 * time.Hour)
	if _, err := o.r.Server.Sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
	page = o.expect(&alpha, true, "GET", "/v2/relay/items?after=0", nil, 200, "pull_answer")
	found := false
	for _, it := range page["items"].([]any) {
		m := it.(map[string]any)
		if m["kind"] == "expired" {
			w, _ := base64.StdEncoding.DecodeString(m["wire_b64"].(string))
			checkDoc(t, "expired_wire", w)
			found = true
		}
	}
	if !found {
		t.Fatalf("no expiry notice on alpha's page %v", page)
	}

	// Rotation: self-authenticating, no hop.
	next := newParty("alpha", 4)
	rec := map[string]any{"v": 1, "type": "host-rotation", "host": "alpha", "old_pub": alpha.pub, "new_pub": next.pub,
		"new_enc_pub": encPub, "iat": isoMs(o.clock())}
	rot := map[string]any{"rotation": map[string]any{"rec": rec, "old_sig": alpha.sign(canonical(rec)), "new_sig": next.sign(canonical(rec))}}
	checkDoc(t, "rotate_request", jsonOf(t, rot))
	o.expect(nil, false, "POST", "/v2/relay/rotate", rot, 200, "rotate_answer")
	o.expect(nil, false, "POST", "/v2/relay/rotate", map[string]any{"rotation": map[string]any{"rec": map[string]any{"old_pub": stranger.pub}}}, 404, "error")
}
