package compat_test

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/relayclient"
)

// What our client accepts and sends: a relay that answers exactly as 0.5.x does (the documents
// below, written out from docs/protocol.md and 0.5.11's relay, with none of agentmbx's additions)
// is driven by our relay client through every call. Each request the client sends is checked
// against its shape and its hop verified as a 0.5.x relay verifies it; each answer must be read
// as the relay meant it.

const (
	fakeEpoch = "2f9d3c52-7a6e-4d1b-9c0e-5b8a1f2e3d4c"
	fakeHead  = int64(1790935200007) // seqs are about 1.7e12, as max(next_seq, now_ms) makes them
)

// zeroFiveRelay is the fake 0.5.x relay.
type zeroFiveRelay struct {
	t      *testing.T
	relay  party
	host   party // the host our client acts as
	peer   party // a peer whose enc-key ad the relay holds
	encPub string
	now    time.Time

	mu   sync.Mutex
	seen map[string]int // route → requests
}

// route answers a request, after checking its body's shape and its hop.
func (z *zeroFiveRelay) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	route := r.Method + " " + r.URL.Path
	z.mu.Lock()
	z.seen[route]++
	z.mu.Unlock()
	answer := func(status int, doc string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, doc)
	}
	requestShape := map[string]string{
		"POST /v1/relay/challenge": "challenge_request", "POST /v1/relay/enrol": "enrol_request",
		"POST /v2/relay/senders": "senders_request", "POST /v2/relay/items": "push_request",
		"POST /v2/relay/ack": "ack_request", "POST /v2/relay/rotate": "rotate_request",
		"POST /v1/relay/messages": "v1_push_request", "POST /v1/relay/ack": "v1_ack_request",
	}[route]
	switch route {
	case "POST /v2/relay/enc-key":
		requestShape = "enc_key_request"
	case "POST /v1/relay/enc-key":
		requestShape = "enc_key_v1_request"
	}
	var req map[string]any
	if requestShape != "" {
		req = checkDoc(z.t, requestShape, body)
	}
	signed := r.Header.Get("x-mbx-sig") != ""
	noHop := route == "POST /v1/relay/challenge" || route == "POST /v1/relay/enrol" || route == "POST /v2/relay/rotate" || (route == "GET /v2/relay/info" && !signed)
	if !noHop && !z.verifyHop(r, body) {
		answer(401, `{"error":"bad relay hop"}`)
		return
	}
	q := r.URL.Query()
	limits := `{"max_item_bytes":524288,"max_batch":200,"max_pull":500,"max_pull_bytes":8388608,"max_targets":64,"retention_days":14,` +
		`"max_queue_items":10000,"max_queue_bytes":52428800,"max_sender_items":2000,"max_sender_bytes":20971520,"max_owner_items":10000,"max_owner_bytes":52428800}`
	switch route {
	case "GET /v2/relay/info":
		you := ""
		if signed {
			you = `,"you":{"host":"alpha","pubkey":"` + z.host.pub + `","head_seq":` + strconv.FormatInt(fakeHead, 10) +
				`,"acked_through":0,"enc_ad":{"enc_pub":null,"exp":null,"v1":"` + z.encPub + `"}}`
		}
		answer(200, `{"v":2,"relay_pubkey":"`+z.relay.pub+`","epoch":"`+fakeEpoch+`","version":"0.5.11","limits":`+limits+you+`}`)
	case "POST /v1/relay/challenge":
		answer(200, `{"challenge":"c2Vzc2lvbi1vbmUtY2hhbGxlbmdl"}`)
	case "POST /v1/relay/enrol":
		in := canonical(map[string]any{"v": 1, "challenge": "c2Vzc2lvbi1vbmUtY2hhbGxlbmdl", "host": req["host"], "pubkey": req["pubkey"], "owner_fp": req["owner_fp"]})
		if !verify(req["pubkey"].(string), in, req["sig"].(string)) {
			answer(401, `{"error":"bad enrolment signature"}`)
			return
		}
		answer(200, `{"ok":true}`)
	case "POST /v2/relay/enc-key", "POST /v1/relay/enc-key", "POST /v2/relay/senders", "POST /v1/relay/ack":
		answer(200, `{"ok":true}`)
	case "POST /v2/relay/items":
		answer(200, z.pushAnswer(req))
	case "GET /v2/relay/items":
		if e := q.Get("epoch"); e != "" && e != fakeEpoch {
			answer(409, `{"error":"relay epoch changed: pull again from 0","epoch":"`+fakeEpoch+`"}`) // no code, as 0.5.x
			return
		}
		answer(200, z.page())
	case "POST /v2/relay/ack":
		through, _ := strconv.ParseInt(string(req["through"].(json.Number)), 10, 64)
		switch {
		case req["epoch"] != fakeEpoch:
			answer(409, `{"error":"relay epoch changed: pull again from 0","code":"EPOCH","epoch":"`+fakeEpoch+`","head_seq":`+strconv.FormatInt(fakeHead, 10)+`}`)
		case through > fakeHead:
			answer(400, `{"error":"ack beyond the last allocated seq: treat as an epoch change","code":"BAD_ACK","epoch":"`+fakeEpoch+`","head_seq":`+strconv.FormatInt(fakeHead, 10)+`}`)
		default:
			answer(200, `{"acked_through":`+strconv.FormatInt(through, 10)+`,"deleted":2,"head_seq":`+strconv.FormatInt(fakeHead, 10)+`}`)
		}
	case "GET /v2/relay/enc-key":
		if q.Get("pubkey") != z.peer.pub {
			answer(404, `{"error":"unknown host"}`)
			return
		}
		ad := map[string]any{"v": 2, "type": "enc-ad", "host": "beta", "host_pubkey": z.peer.pub, "enc_pub": z.encPub,
			"iat": isoMs(z.now.Add(-time.Hour)), "exp": isoMs(z.now.Add(29 * 24 * time.Hour))}
		v1sig := z.peer.sign(canonical(map[string]any{"v": 1, "host": "beta", "enc_pub": z.encPub}))
		answer(200, string(jsonOf(z.t, map[string]any{"host": "beta", "host_pubkey": z.peer.pub, "enc_pub": z.encPub,
			"sig": v1sig, "ad": ad, "ad_sig": z.peer.sign(canonical(ad))})))
	case "POST /v2/relay/rotate":
		answer(200, `{"moved":3}`)
	case "POST /v1/relay/messages":
		answer(200, `{"stored":`+strconv.Itoa(len(req["envelopes"].([]any)))+`}`)
	case "GET /v1/relay/messages":
		var env map[string]any
		_ = json.Unmarshal(z.envelopeWire(), &env)
		answer(200, string(jsonOf(z.t, map[string]any{"items": []any{map[string]any{"seq": 1, "envelope": env, "from": "beta"}}, "cursor": 1})))
	default:
		answer(404, `{"error":"not found"}`)
	}
}

// verifyHop checks the request's hop as a 0.5.x relay does: v2 paths sign the query and name the
// key, v1 paths sign the pathname and name the host.
func (z *zeroFiveRelay) verifyHop(r *http.Request, body []byte) bool {
	ts, sig := r.Header.Get("x-mbx-ts"), r.Header.Get("x-mbx-sig")
	ms, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || ms-z.now.UnixMilli() > 300_000 || z.now.UnixMilli()-ms > 300_000 {
		return false
	}
	path := r.URL.Path
	key := z.host.pub
	if strings.HasPrefix(path, "/v2/") {
		if r.URL.RawQuery != "" {
			path += "?" + r.URL.RawQuery
		}
		if r.Header.Get("x-mbx-key") != key {
			return false
		}
	} else if r.Header.Get("x-mbx-host") != "alpha" {
		return false
	}
	in := canonical(map[string]any{"method": r.Method, "path": path, "ts": ts, "body": r.Method + ":" + path + ":" + ts + ":" + string(body)})
	return verify(key, in, sig)
}

func verify(pub string, msg []byte, sig string) bool {
	k, err1 := base64.StdEncoding.DecodeString(pub)
	s, err2 := base64.StdEncoding.DecodeString(sig)
	return err1 == nil && err2 == nil && len(k) == ed25519.PublicKeySize && ed25519.Verify(k, msg, s)
}

func (z *zeroFiveRelay) envelopeWire() []byte {
	c := vectorCase(z.t, "envelope.json", "simple message")
	return []byte(c["targets"].([]any)[0].(map[string]any)["wire"].(string))
}

// pushAnswer accepts every item with a statement the relay signs, except one named
// "01KKNTQ2CN9WJ3MR4Q1P12F0XX", which a 0.5.x relay rejects (targets [] and nothing else).
func (z *zeroFiveRelay) pushAnswer(req map[string]any) string {
	var results []any
	for i, raw := range req["items"].([]any) {
		it := raw.(map[string]any)
		id := it["item_id"].(string)
		if id == "01KKNTQ2CN9WJ3MR4Q1P12F0XX" {
			results = append(results, map[string]any{"item_id": id, "status": "rejected:target not enrolled", "targets": []any{}})
			continue
		}
		var ts, acc []any
		for _, traw := range it["targets"].([]any) {
			t := traw.(map[string]any)
			w, _ := base64.StdEncoding.DecodeString(t["wire_b64"].(string))
			seq := fakeHead + int64(i) + 1
			ts = append(ts, map[string]any{"host_pubkey": t["host_pubkey"], "seq": seq})
			acc = append(acc, map[string]any{"host_pubkey": t["host_pubkey"], "seq": seq, "wire_hash": sha256hex(w)})
		}
		a := map[string]any{"v": 1, "type": "relay-accept", "relay_pubkey": z.relay.pub, "epoch": fakeEpoch,
			"sender_pubkey": z.host.pub, "item_id": id, "targets": acc, "at": isoMs(z.now)}
		results = append(results, map[string]any{"item_id": id, "status": "accepted", "targets": ts, "accept": a, "sig": z.relay.sign(canonical(a))})
	}
	doc := jsonOf(z.t, map[string]any{"results": results})
	checkDoc(z.t, "push_answer", doc)
	return string(doc)
}

// page is a pull answer with one item of each kind.
func (z *zeroFiveRelay) page() string {
	rc := vectorCase(z.t, "receipt.json", "delivered")
	notice := map[string]any{"v": 1, "type": "relay-expired", "item_id": "01KKNTQ2CN9WJ3MR4Q1P12F02T", "target_pubkey": z.peer.pub,
		"accepted_at": isoMs(z.now.Add(-15 * 24 * time.Hour)), "expired_at": isoMs(z.now.Add(-time.Hour))}
	expired := canonical(map[string]any{"notice": notice, "sig": z.relay.sign(canonical(notice))})
	checkDoc(z.t, "expired_wire", expired)
	doc := jsonOf(z.t, map[string]any{"epoch": fakeEpoch, "head_seq": fakeHead, "items": []any{
		map[string]any{"seq": fakeHead - 2, "kind": "envelope", "item_id": "01KKNTQ2CN9WJ3MR4Q1P12F02T", "sender_pubkey": z.peer.pub, "wire_b64": b64(z.envelopeWire())},
		map[string]any{"seq": fakeHead - 1, "kind": "receipt", "item_id": rc["item_id"], "sender_pubkey": z.peer.pub, "wire_b64": b64([]byte(rc["wire"].(string)))},
		map[string]any{"seq": fakeHead, "kind": "expired", "item_id": "expired:01KKNTQ2CN9WJ3MR4Q1P12F02T:" + z.peer.pub, "sender_pubkey": z.relay.pub, "wire_b64": b64(expired)},
	}, "last_seq": fakeHead, "more": false})
	checkDoc(z.t, "pull_answer", doc)
	return string(doc)
}

func TestOurClientAgainstZeroFiveAnswers(t *testing.T) {
	now := time.Now().UTC().Truncate(time.Millisecond)
	host := newParty("alpha", 1)
	z := &zeroFiveRelay{t: t, relay: newParty("relay", 7), host: host, peer: newParty("beta", 2), now: now, seen: map[string]int{}}
	z.encPub = newParty("enc", 5).pub
	ts := httptest.NewServer(z)
	t.Cleanup(ts.Close)
	ctx := context.Background()
	key, err := mbx.SigningKeyFromSeed(b64(host.priv.Seed()))
	if err != nil {
		t.Fatal(err)
	}
	opts := &relayclient.Options{Clock: func() time.Time { return now }, Timeout: 20 * time.Second, RetryMax: -1}

	info, err := relayclient.Discover(ctx, ts.URL, opts)
	if err != nil || info.RelayPubkey != z.relay.pub || info.Epoch != fakeEpoch || info.You != nil || info.Limits.MaxBatch != 200 {
		t.Fatalf("Discover = %+v, %v", info, err)
	}
	pin, err := relayclient.PinInfo(ts.URL, info, mbx.Fingerprint(z.relay.pub))
	if err != nil {
		t.Fatal(err)
	}
	c, err := relayclient.New(pin, "alpha", key, opts)
	if err != nil {
		t.Fatal(err)
	}
	info, err = c.Info(ctx)
	if err != nil {
		t.Fatalf("signed info with a v1 ad held (issue 26, finding 2): %v", err)
	}
	if y := info.You; y == nil || y.HeadSeq != fakeHead || !y.EncAdServed || y.EncAd == nil || y.EncAd.V1 == nil || *y.EncAd.V1 != z.encPub || y.EncAd.EncPub != nil || y.EncAd.Exp != nil {
		t.Fatalf("you = %+v", info.You)
	}
	if err := c.Enrol(ctx, "", ""); err != nil {
		t.Fatalf("enrol: %v", err)
	}
	if _, err := c.PublishEncAd(ctx, z.encPub, 0); err != nil {
		t.Fatalf("publish enc-key ad: %v", err)
	}
	if err := c.PublishEncAdV1(ctx, z.encPub); err != nil {
		t.Fatalf("publish v1 enc-key ad: %v", err)
	}
	if _, err := c.PublishSenders(ctx, []string{z.peer.pub}); err != nil {
		t.Fatalf("publish senders: %v", err)
	}

	wire := z.envelopeWire()
	res, err := c.Push(ctx, []relayclient.PushItem{
		{Kind: "envelope", ItemID: "01KKNTQ2CN9WJ3MR4Q1P12F02T", Targets: []relayclient.PushTarget{{HostPubkey: z.peer.pub, Wire: wire}}},
		{Kind: "envelope", ItemID: "01KKNTQ2CN9WJ3MR4Q1P12F0XX", Targets: []relayclient.PushTarget{{HostPubkey: z.peer.pub, Wire: wire}}},
	})
	if err != nil {
		t.Fatalf("push: %v", err)
	}
	if tr := res[0].Targets[0]; !tr.Accepted() || tr.Seq != fakeHead+1 || tr.Epoch != fakeEpoch {
		t.Fatalf("accepted item = %+v", tr)
	}
	if tr := res[1].Targets[0]; tr.Verdict != relayclient.VerdictRejected || tr.Code != "target not enrolled" {
		t.Fatalf("rejected item = %+v", tr)
	}

	page, err := c.Pull(ctx, relayclient.PullRequest{After: 0, Limit: 500})
	if err != nil || len(page.Items) != 3 || page.HeadSeq != fakeHead || page.LastSeq != fakeHead || page.Items[2].Kind != "expired" {
		t.Fatalf("pull = %+v, %v", page, err)
	}
	var ee *relayclient.EpochError
	if _, err := c.Pull(ctx, relayclient.PullRequest{After: 5, Epoch: "stale"}); !errors.As(err, &ee) || ee.Epoch != fakeEpoch {
		t.Fatalf("pull in a stale epoch (0.5.x's 409 has no code) = %v, want an EpochError naming %s", err, fakeEpoch)
	}
	if ack, err := c.Ack(ctx, fakeEpoch, fakeHead); err != nil || ack.AckedThrough != fakeHead || ack.HeadSeq != fakeHead || ack.Deleted != 2 {
		t.Fatalf("ack = %+v, %v", ack, err)
	}
	if _, err := c.Ack(ctx, "stale", 1); !errors.As(err, &ee) || ee.Epoch != fakeEpoch {
		t.Fatalf("ack in a stale epoch = %v, want an EpochError", err)
	}
	if _, err := c.Ack(ctx, fakeEpoch, fakeHead+5); !errors.Is(err, relayclient.ErrRewound) {
		t.Fatalf("ack past the head = %v, want ErrRewound", err)
	}
	enc, _, err := c.FetchEncAd(ctx, mbx.EncAdPeer{Host: "beta", HostPubkey: z.peer.pub}, nil)
	if err != nil || enc != z.encPub {
		t.Fatalf("fetch enc-key ad = %q, %v", enc, err)
	}
	if _, _, err := c.FetchEncAd(ctx, mbx.EncAdPeer{Host: "gamma", HostPubkey: newParty("gamma", 3).pub}, nil); !errors.Is(err, relayclient.ErrNotFound) {
		t.Fatalf("fetch of an unknown peer's ad = %v, want ErrNotFound", err)
	}
	next, err := mbx.SigningKeyFromSeed(b64(newParty("alpha", 4).priv.Seed()))
	if err != nil {
		t.Fatal(err)
	}
	rot, err := mbx.SignRotation("alpha", key, next, z.encPub, now)
	if err != nil {
		t.Fatal(err)
	}
	if moved, err := c.Rotate(ctx, rot); err != nil || moved.Moved != 3 {
		t.Fatalf("rotate = %+v, %v", moved, err)
	}

	v1, err := relayclient.NewV1(ts.URL, "alpha", key, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := v1.PublishEncAd(ctx, z.encPub); err != nil {
		t.Fatalf("v1 enc-key ad: %v", err)
	}
	if r, err := v1.Push(ctx, []json.RawMessage{wire}); err != nil || r.Stored != 1 {
		t.Fatalf("v1 push = %+v, %v", r, err)
	}
	if p, err := v1.Pull(ctx, 0); err != nil || len(p.Items) != 1 || p.Cursor != 1 || p.Items[0].From != "beta" {
		t.Fatalf("v1 pull = %+v, %v", p, err)
	}
	if err := v1.Ack(ctx, 1); err != nil {
		t.Fatalf("v1 ack: %v", err)
	}

	z.mu.Lock()
	defer z.mu.Unlock()
	for _, route := range []string{"GET /v2/relay/info", "POST /v1/relay/challenge", "POST /v1/relay/enrol", "POST /v2/relay/enc-key",
		"POST /v1/relay/enc-key", "POST /v2/relay/senders", "POST /v2/relay/items", "GET /v2/relay/items", "POST /v2/relay/ack",
		"GET /v2/relay/enc-key", "POST /v2/relay/rotate", "POST /v1/relay/messages", "GET /v1/relay/messages", "POST /v1/relay/ack"} {
		if z.seen[route] == 0 {
			t.Errorf("our client never called %s", route)
		}
	}
}
