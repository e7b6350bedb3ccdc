package compat_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"testing"
	"time"
)

// The 0.5.x client's relay sessions against our relay, emulated step by step from what 0.5.11's
// relay client does (its relayOpen, ensureEnrolled, ensureEncAd, publishSenders,
// relayPushOutbox, relayReceive and relaySettle, as docs/protocol.md and issue 26 describe them):
// each session reads the signed info the way it does (including its enc-ad reading, which hands
// any non-null v1 to a fingerprint function that takes only a key string), enrols or confirms,
// publishes what drifted, pushes with accept verification, pulls, acks, and settles on the
// delivery receipt. Two such hosts run three sessions each; the second and third run with both
// ads held (the v1 ad among them), where 0.5.11 failed against our relay before issue 26.

// zeroFiveHost is one emulated 0.5.x host and what its store (kv) remembers between sessions.
type zeroFiveHost struct {
	t    *testing.T
	p    party
	enc  string
	o    *ourRelay
	kv   map[string]string
	sent map[string]string // msg id → recipient host, until settled
	log  []string          // the steps run, in order
	// published counts the publications (enc-key v2, v1, senders) of the last session.
	published int
}

func (h *zeroFiveHost) step(format string, a ...any) {
	h.log = append(h.log, fmt.Sprintf(format, a...))
}

// fingerprint is 0.5.x's: it takes a base64 key; anything else throws.
func fingerprint(v any) (string, error) {
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("TypeError: fingerprint of %#v", v)
	}
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil || len(b) != 32 {
		return "", fmt.Errorf("fingerprint of %q: not a key", s)
	}
	return sha256hex(b)[:16], nil
}

// call is 0.5.x's call(): a signed v2 hop (v1 for /v1 paths), status and JSON.
func (h *zeroFiveHost) call(method, pathQuery string, body any) (int, map[string]any) {
	var raw []byte
	if body != nil {
		raw = jsonOf(h.t, body)
	}
	code, b := h.o.call(&h.p, true, method, pathQuery, raw)
	var m map[string]any
	_ = decodeNumber(b, &m)
	return code, m
}

func decodeNumber(b []byte, v any) error {
	dec := json.NewDecoder(bytesReader(b))
	dec.UseNumber()
	return dec.Decode(v)
}

// session runs one relay session (relayOpen, then push, receive and settle) and returns the
// first failure, as the 0.5.x daemon would meet it.
func (h *zeroFiveHost) session(peer *zeroFiveHost, outbox []pushRow) error {
	h.published = 0
	now := h.o.clock()
	// fetchInfo, signed: v 2, relay_pubkey and epoch strings, limits present.
	code, info := h.call("GET", "/v2/relay/info", nil)
	if code != 200 || info["v"] != json.Number("2") || info["limits"] == nil {
		return fmt.Errorf("info: %d %v", code, info)
	}
	rk, ok1 := info["relay_pubkey"].(string)
	epoch, ok2 := info["epoch"].(string)
	if !ok1 || !ok2 {
		return errors.New("info: relay_pubkey or epoch is not a string")
	}
	h.step("signed info")
	// checkRelayKey: pinned on first use, must match after.
	if pinned, ok := h.kv["relay-key"]; ok && pinned != rk {
		return errors.New("relay key changed")
	}
	h.kv["relay-key"] = rk
	h.step("relay key")
	if known, ok := h.kv["relay-epoch"]; ok && known != epoch {
		delete(h.kv, "position")
	}
	h.kv["relay-epoch"] = epoch
	you, _ := info["you"].(map[string]any)
	// ensureEnrolled: you names this key and host, else the challenge.
	if you == nil || you["pubkey"] != h.p.pub || you["host"] != h.p.host {
		code, ch := h.call("POST", "/v1/relay/challenge", map[string]any{"host": h.p.host, "pubkey": h.p.pub})
		challenge, ok := ch["challenge"].(string)
		if code != 200 || !ok {
			return fmt.Errorf("challenge: %d %v", code, ch)
		}
		sig := h.p.sign(canonical(map[string]any{"v": 1, "challenge": challenge, "host": h.p.host, "pubkey": h.p.pub, "owner_fp": ""}))
		if code, r := h.call("POST", "/v1/relay/enrol", map[string]any{"host": h.p.host, "pubkey": h.p.pub, "owner_fp": "", "sig": sig}); code != 200 {
			return fmt.Errorf("enrol: %d %v", code, r)
		}
		delete(h.kv, "relay-enc-ad")
		delete(h.kv, "relay-senders")
		h.step("enrolled")
	} else {
		h.step("enrolment confirmed")
	}
	// ensureEncAd.
	if err := h.ensureEncAd(you, epoch, now); err != nil {
		return err
	}
	// publishSenders: when the peer set's digest changed.
	if digest := h.p.pub + ":" + peer.p.pub; h.kv["relay-senders"] != digest {
		list := map[string]any{"v": 1, "type": "relay-senders", "host_pubkey": h.p.pub, "senders": []any{peer.p.pub}, "iat": isoMs(now)}
		if code, r := h.call("POST", "/v2/relay/senders", map[string]any{"list": list, "sig": h.p.sign(canonical(list))}); code != 200 {
			return fmt.Errorf("senders: %d %v", code, r)
		}
		h.kv["relay-senders"] = digest
		h.published++
		h.step("senders published")
	}
	if err := h.push(rk, outbox); err != nil {
		return err
	}
	return h.receive(peer, epoch)
}

func (h *zeroFiveHost) ensureEncAd(you map[string]any, epoch string, now time.Time) error {
	served, present := any(nil), false
	if you != nil {
		served, present = you["enc_ad"]
	}
	var ad map[string]any
	if served != nil {
		var ok bool
		if ad, ok = served.(map[string]any); !ok {
			return fmt.Errorf("enc_ad %#v is not an object", served)
		}
	}
	drift := present && served == nil
	if ad != nil {
		exp, _ := ad["exp"].(string)
		expAt, err := time.Parse(time.RFC3339Nano, exp)
		drift = ad["enc_pub"] != h.enc || ad["v1"] != h.enc || exp == "" || err != nil || !expAt.After(now)
	}
	// stale(false): a served v1 that is not this host's key is reported by its fingerprint.
	stale := func() error {
		if ad != nil && jsTruthy(ad["v1"]) && ad["v1"] != h.enc {
			_, err := fingerprint(ad["v1"])
			return err
		}
		return nil
	}
	var cur map[string]any
	_ = json.Unmarshal([]byte(h.kv["relay-enc-ad"]), &cur)
	if cur != nil && !drift && cur["epoch"] == epoch && cur["enc_pub"] == h.enc {
		if err := stale(); err != nil {
			return fmt.Errorf("enc-ad check: %w", err)
		}
		h.step("enc-key ads current")
		return nil
	}
	if cur != nil && drift && ad != nil && jsTruthy(ad["v1"]) {
		if _, err := fingerprint(ad["v1"]); err != nil { // the audit of the drift
			return fmt.Errorf("enc-ad audit: %w", err)
		}
	}
	v2 := map[string]any{"v": 2, "type": "enc-ad", "host": h.p.host, "host_pubkey": h.p.pub, "enc_pub": h.enc,
		"iat": isoMs(now), "exp": isoMs(now.Add(30 * 24 * time.Hour))}
	if code, r := h.call("POST", "/v2/relay/enc-key", map[string]any{"ad": v2, "sig": h.p.sign(canonical(v2))}); code != 200 {
		return fmt.Errorf("publish v2 ad: %d %v", code, r)
	}
	v1sig := h.p.sign(canonical(map[string]any{"v": 1, "host": h.p.host, "enc_pub": h.enc}))
	code, r := h.o.call(&h.p, false, "POST", "/v1/relay/enc-key", jsonOf(h.t, map[string]any{"enc_pub": h.enc, "sig": v1sig}))
	if code != 200 {
		return fmt.Errorf("publish v1 ad: %d %s", code, r)
	}
	h.kv["relay-enc-ad"] = string(jsonOf(h.t, map[string]any{"host_pubkey": h.p.pub, "enc_pub": h.enc, "iat": isoMs(now), "epoch": epoch}))
	h.published += 2
	h.step("enc-key ads published")
	return nil
}

// jsTruthy is JavaScript's truthiness of a decoded JSON value.
func jsTruthy(v any) bool {
	switch x := v.(type) {
	case nil:
		return false
	case bool:
		return x
	case string:
		return x != ""
	case json.Number:
		f, err := x.Float64()
		return err == nil && f != 0
	}
	return true
}

// pushRow is an outbox row: the message id, the target's key and the sealed wire.
type pushRow struct {
	id, target string
	wire       []byte
}

// push is relayPushOutbox: a row leaves the outbox only on a valid accept by the pinned key.
func (h *zeroFiveHost) push(relayKey string, rows []pushRow) error {
	if len(rows) == 0 {
		return nil
	}
	var items []any
	for _, r := range rows {
		items = append(items, map[string]any{"kind": "envelope", "item_id": r.id, "targets": []any{map[string]any{"host_pubkey": r.target, "wire_b64": b64(r.wire)}}})
	}
	code, ans := h.call("POST", "/v2/relay/items", map[string]any{"items": items})
	results, _ := ans["results"].([]any)
	if code != 200 || len(results) != len(rows) {
		return fmt.Errorf("push: %d %v", code, ans)
	}
	for i, r := range rows {
		res := results[i].(map[string]any)
		a, _ := res["accept"].(map[string]any)
		sig, _ := res["sig"].(string)
		if (res["status"] != "accepted" && res["status"] != "duplicate") || a == nil || a["type"] != "relay-accept" ||
			a["relay_pubkey"] != relayKey || a["sender_pubkey"] != h.p.pub || a["item_id"] != r.id {
			return fmt.Errorf("push: no valid accept for %s: %v", r.id, res)
		}
		t := a["targets"].([]any)[0].(map[string]any)
		if t["host_pubkey"] != r.target || t["wire_hash"] != sha256hex(r.wire) || !verify(relayKey, canonicalNumbers(a), sig) {
			return fmt.Errorf("push: the accept for %s does not verify", r.id)
		}
		h.sent[r.id] = r.target
	}
	h.step("pushed %d, accepted", len(rows))
	return nil
}

// receive is relayReceive: pages in seq order, then the ack; an envelope is taken and its
// delivery receipt pushed back, a receipt settles the row it names.
func (h *zeroFiveHost) receive(peer *zeroFiveHost, epoch string) error {
	pos, _ := strconv.ParseInt(h.kv["position"], 10, 64)
	code, page := h.call("GET", "/v2/relay/items?after="+strconv.FormatInt(pos, 10)+"&limit=500&epoch="+url.QueryEscape(epoch), nil)
	if code != 200 || page["epoch"] != epoch {
		return fmt.Errorf("pull: %d %v", code, page)
	}
	through := pos
	var receipts []any
	for _, raw := range page["items"].([]any) {
		it := raw.(map[string]any)
		seq, _ := strconv.ParseInt(string(it["seq"].(json.Number)), 10, 64)
		wire, err := base64.StdEncoding.DecodeString(it["wire_b64"].(string))
		if err != nil {
			return fmt.Errorf("pull: item %d: %v", seq, err)
		}
		switch it["kind"] {
		case "envelope":
			rec := map[string]any{"v": 1, "type": "receipt", "msg": it["item_id"], "recipient": "bob@" + h.p.host,
				"state": "delivered", "at": isoMs(h.o.clock()), "seq": 1}
			w := canonical(map[string]any{"rec": rec, "sig": h.p.sign(canonical(rec))})
			receipts = append(receipts, map[string]any{"kind": "receipt", "item_id": "receipt:" + it["item_id"].(string) + ":bob@" + h.p.host + ":1",
				"targets": []any{map[string]any{"host_pubkey": it["sender_pubkey"], "wire_b64": b64(w)}}})
			h.step("took envelope %s", it["item_id"])
		case "receipt":
			var signed struct {
				Rec map[string]any `json:"rec"`
				Sig string         `json:"sig"`
			}
			if err := decodeNumber(wire, &signed); err != nil || !verify(peer.p.pub, canonicalNumbers(signed.Rec), signed.Sig) {
				return fmt.Errorf("receipt %v does not verify", it["item_id"])
			}
			delete(h.sent, signed.Rec["msg"].(string))
			h.step("settled %s", signed.Rec["msg"])
		}
		through = seq
	}
	h.kv["position"] = strconv.FormatInt(through, 10)
	if through > pos {
		if code, r := h.call("POST", "/v2/relay/ack", map[string]any{"epoch": epoch, "through": through}); code != 200 {
			return fmt.Errorf("ack: %d %v", code, r)
		}
		h.step("acked")
	}
	if len(receipts) > 0 {
		code, ans := h.call("POST", "/v2/relay/items", map[string]any{"items": receipts})
		if code != 200 {
			return fmt.Errorf("receipt push: %d %v", code, ans)
		}
		for _, r := range ans["results"].([]any) {
			if st := r.(map[string]any)["status"]; st != "accepted" && st != "duplicate" {
				return fmt.Errorf("receipt push: %v", r)
			}
		}
		h.step("receipts pushed")
	}
	return nil
}

// canonicalNumbers is canonical for a tree decoded with UseNumber (integers only).
func canonicalNumbers(v any) []byte {
	var conv func(any) any
	conv = func(v any) any {
		switch x := v.(type) {
		case json.Number:
			n, _ := strconv.ParseInt(string(x), 10, 64)
			return n
		case map[string]any:
			m := map[string]any{}
			for k, e := range x {
				m[k] = conv(e)
			}
			return m
		case []any:
			out := make([]any, len(x))
			for i, e := range x {
				out[i] = conv(e)
			}
			return out
		}
		return v
	}
	return canonical(conv(v))
}

// TestZeroFiveSessionsAgainstOurRelay: two emulated 0.5.x hosts, three sessions each. The first
// session enrols and publishes; alpha's message goes to beta, beta's receipt back to alpha. The
// second and third sessions, with both ads (the v1 one among them) held, find everything current
// and publish nothing.
func TestZeroFiveSessionsAgainstOurRelay(t *testing.T) {
	o := startOurRelay(t)
	envCase := vectorCase(t, "envelope.json", "simple message")
	recCase := vectorCase(t, "receipt.json", "delivered")
	target := envCase["targets"].([]any)[0].(map[string]any)
	alpha := &zeroFiveHost{t: t, p: partyFromSeed("alpha", seedOf(t, envCase, "sender_seed_b64")), enc: newParty("alpha-enc", 11).pub,
		o: o, kv: map[string]string{}, sent: map[string]string{}}
	beta := &zeroFiveHost{t: t, p: partyFromSeed("beta", seedOf(t, recCase, "signer_seed_b64")), enc: target["recipient_enc_public_key"].(string),
		o: o, kv: map[string]string{}, sent: map[string]string{}}
	wire := []byte(target["wire"].(string))
	var env struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(wire, &env); err != nil {
		t.Fatal(err)
	}

	for session := 1; session <= 3; session++ {
		var out []pushRow
		if session == 1 {
			// beta opens first so that it is enrolled and accepts alpha before alpha pushes.
			if err := beta.session(alpha, nil); err != nil {
				t.Fatalf("beta, session 1: %v (steps %q)", err, beta.log)
			}
			out = []pushRow{{id: env.ID, target: beta.p.pub, wire: wire}}
		}
		if err := alpha.session(beta, out); err != nil {
			t.Fatalf("alpha, session %d: %v (steps %q)", session, err, alpha.log)
		}
		if session > 1 && alpha.published != 0 {
			t.Errorf("alpha, session %d: republished %d records; with both ads held nothing is due", session, alpha.published)
		}
		if err := beta.session(alpha, nil); err != nil {
			t.Fatalf("beta, session %d: %v (steps %q)", session, err, beta.log)
		}
		if session > 1 && beta.published != 0 {
			t.Errorf("beta, session %d: republished %d records", session, beta.published)
		}
		o.advance(time.Minute)
	}
	if len(alpha.sent) != 0 {
		t.Fatalf("alpha's message never settled: %v (steps %q)", alpha.sent, alpha.log)
	}
	// The emulation fails where 0.5.11 failed against our relay before issue 26: a boolean v1
	// reaches its fingerprint function on the second session.
	old := map[string]any{"enc_ad": map[string]any{"enc_pub": alpha.enc, "exp": isoMs(o.clock().Add(time.Hour)), "v1": true}}
	if err := alpha.ensureEncAd(old, alpha.kv["relay-epoch"], o.clock()); err == nil {
		t.Fatal("the emulated 0.5.x client took a boolean v1")
	}
	t.Logf("alpha: %d steps: %q", len(alpha.log), alpha.log)
	t.Logf("beta: %d steps: %q", len(beta.log), beta.log)
}

func bytesReader(b []byte) *bytes.Reader { return bytes.NewReader(b) }
