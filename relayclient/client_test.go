package relayclient

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/mbx"
)

var bg = context.Background()

func TestNormalizeURL(t *testing.T) {
	tests := []struct {
		in, want string
		ok       bool
	}{
		{"https://relay.agentmbx.com", "https://relay.agentmbx.com", true},
		{"https://Relay.AgentMBX.com/", "https://relay.agentmbx.com", true},
		{"relay.example:7374", "", false}, // no scheme: refused, not guessed
		{"127.0.0.1:7374", "", false},
		{"http://127.0.0.1:7374/prefix/", "http://127.0.0.1:7374/prefix", true},
		{"  HTTPS://r.example  ", "https://r.example", true},
		{"ftp://r.example", "", false},
		{"https://", "", false},
		{"https://user:pw@r.example", "", false},
		{"https://r.example/?x=1", "", false},
		{"https://r.example/#frag", "", false},
		{"", "", false},
	}
	for _, tc := range tests {
		got, err := NormalizeURL(tc.in)
		if tc.ok && (err != nil || got != tc.want) {
			t.Errorf("NormalizeURL(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
		if !tc.ok && !errors.Is(err, ErrInvalid) {
			t.Errorf("NormalizeURL(%q) = %q, %v; want ErrInvalid", tc.in, got, err)
		}
	}
}

func TestDiscoverAndPin(t *testing.T) {
	f := newFake(t)
	info, err := Discover(bg, f.srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	if info.You != nil {
		t.Fatal("an unsigned info request got a you block")
	}
	if f.last().header.Get(mbx.HeaderSig) != "" {
		t.Fatal("Discover signed its request; it has no host key to sign with")
	}
	fp := f.relayKey.Fingerprint()
	for _, key := range []string{"", fp, strings.ToUpper(strings.ReplaceAll(fp, "-", ":")), f.relayKey.PublicKey()} {
		p, err := PinInfo(f.srv.URL+"/", info, key)
		if err != nil || p.RelayKey != f.relayKey.PublicKey() || p.URL != f.srv.URL {
			t.Errorf("PinInfo with --key %q = %+v, %v", key, p, err)
		}
	}
	other := keyFor(t, 99)
	for _, key := range []string{other.Fingerprint(), other.PublicKey()} {
		_, err = PinInfo(f.srv.URL, info, key)
		var kc *KeyChangedError
		if !errors.Is(err, ErrRelayKeyChanged) || !errors.As(err, &kc) || kc.Served != fp {
			t.Errorf("PinInfo with another key %q: err = %v, want ErrRelayKeyChanged serving %s", key, err, fp)
		}
	}
	if _, err := PinInfo(f.srv.URL, info, "not-a-fingerprint"); !errors.Is(err, ErrInvalid) {
		t.Errorf("PinInfo with a bad fingerprint: err = %v, want ErrInvalid", err)
	}

	f.handle("GET /v2/relay/info", nil) // a v1-only relay
	if _, err := Discover(bg, f.srv.URL, nil); !errors.Is(err, ErrV1Only) {
		t.Fatalf("Discover on a v1 relay: err = %v, want ErrV1Only", err)
	}
}

func TestInfoSignedAndKeyChangeStopsEverything(t *testing.T) {
	f := newFake(t)
	c := f.client(t)
	info, err := c.Info(bg)
	if err != nil {
		t.Fatal(err)
	}
	if r := f.last(); r.hopErr != nil || r.header.Get(mbx.HeaderKey) != f.hostKey.PublicKey() {
		t.Fatalf("info hop: %v (x-mbx-key %q)", r.hopErr, r.header.Get(mbx.HeaderKey))
	}
	if info.You == nil || info.You.HeadSeq != 7 || info.You.AckedThrough != 3 {
		t.Fatalf("you = %+v, want head 7 acked 3", info.You)
	}

	// The relay now serves another key.
	f.relayKey = keyFor(t, 50)
	_, err = c.Info(bg)
	var kc *KeyChangedError
	if !errors.Is(err, ErrRelayKeyChanged) || !errors.As(err, &kc) || kc.Served != f.relayKey.Fingerprint() {
		t.Fatalf("info after a key change: err = %v, want ErrRelayKeyChanged", err)
	}
	if c.Stopped() == nil {
		t.Fatal("Stopped() = nil after a key change")
	}
	n := f.count()
	calls := map[string]func() error{
		"info": func() error { _, err := c.Info(bg); return err },
		"pull": func() error { _, err := c.Pull(bg, PullRequest{}); return err },
		"ack":  func() error { _, err := c.Ack(bg, "ep-1", 1); return err },
		"push": func() error {
			_, err := c.Push(bg, []PushItem{{Kind: "envelope", ItemID: "x", Targets: []PushTarget{{HostPubkey: f.hostKey.PublicKey(), Wire: []byte("w")}}}})
			return err
		},
		"enrol":   func() error { return c.Enrol(bg, "", "") },
		"senders": func() error { _, err := c.PublishSenders(bg, nil); return err },
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, ErrRelayKeyChanged) {
			t.Errorf("%s after the key change: err = %v, want ErrRelayKeyChanged", name, err)
		}
	}
	if f.count() != n {
		t.Fatalf("a stopped client sent %d requests", f.count()-n)
	}
}

// TestInfoReadsZeroFiveEncAd: a 0.5.x relay serves you.enc_ad.v1 as the v1 ad's enc key (a
// string); reading it as anything else failed every signed info (issue 26).
func TestInfoReadsZeroFiveEncAd(t *testing.T) {
	f := newFake(t)
	enc := encKeyFor(t, 1).PublicKey()
	f.handle("GET /v2/relay/info", func(w http.ResponseWriter, r *http.Request, _ []byte) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"v":2,"relay_pubkey":"`+f.relayKey.PublicKey()+`","epoch":"ep-1","version":"0.5.11",`+
			`"limits":{"max_item_bytes":524288,"max_batch":200,"max_pull":500,"max_pull_bytes":8388608,"max_targets":64,`+
			`"retention_days":14,"max_queue_items":10000,"max_queue_bytes":52428800,"max_sender_items":2000,`+
			`"max_sender_bytes":20971520,"max_owner_items":10000,"max_owner_bytes":52428800},`+
			`"you":{"host":"alpha","pubkey":"`+f.hostKey.PublicKey()+`","head_seq":0,"acked_through":0,`+
			`"enc_ad":{"enc_pub":null,"exp":null,"v1":"`+enc+`"}}}`)
	})
	info, err := f.client(t).Info(bg)
	if err != nil {
		t.Fatalf("info with a v1 ad held: %v", err)
	}
	if y := info.You; y == nil || !y.EncAdServed || y.EncAd == nil || y.EncAd.V1 == nil || *y.EncAd.V1 != enc || y.EncAd.EncPub != nil || y.EncAd.Holds(enc, t0) {
		t.Fatalf("you = %+v, want enc_ad {enc_pub:null, exp:null, v1:%s}, not held", info.You, enc)
	}
}

func TestInfoRefusesAnswerThatIsNotInfo(t *testing.T) {
	tests := []struct {
		name string
		body string
	}{
		{"not JSON", `<html>`},
		{"v1", `{"v":1,"relay_pubkey":"x","epoch":"e"}`},
		{"no epoch", `{"v":2,"relay_pubkey":"edczNl8CO00AItxuWzPTdaQUzDNS7LJI9QUfd1Zy0NY=","limits":{"max_item_bytes":1,"max_batch":1,"max_pull":1,"max_pull_bytes":1,"retention_days":1}}`},
		{"no limits", `{"v":2,"relay_pubkey":"edczNl8CO00AItxuWzPTdaQUzDNS7LJI9QUfd1Zy0NY=","epoch":"e"}`},
		{"retention beyond any relay's", `{"v":2,"relay_pubkey":"edczNl8CO00AItxuWzPTdaQUzDNS7LJI9QUfd1Zy0NY=","epoch":"e","limits":{"max_item_bytes":1,"max_batch":1,"max_pull":1,"max_pull_bytes":1,"retention_days":106751992}}`},
		{"an epoch with a control character", `{"v":2,"relay_pubkey":"edczNl8CO00AItxuWzPTdaQUzDNS7LJI9QUfd1Zy0NY=","epoch":"e\u0001","limits":{"max_item_bytes":1,"max_batch":1,"max_pull":1,"max_pull_bytes":1,"retention_days":1}}`},
		{"someone else's you", `{"v":2,"relay_pubkey":"edczNl8CO00AItxuWzPTdaQUzDNS7LJI9QUfd1Zy0NY=","epoch":"e","limits":{"max_item_bytes":1,"max_batch":1,"max_pull":1,"max_pull_bytes":1,"retention_days":1},"you":{"pubkey":"edczNl8CO00AItxuWzPTdaQUzDNS7LJI9QUfd1Zy0NY=","head_seq":1}}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t)
			f.handle("GET /v2/relay/info", func(w http.ResponseWriter, _ *http.Request, _ []byte) {
				w.WriteHeader(200)
				_, _ = w.Write([]byte(tc.body))
			})
			if _, err := f.client(t).Info(bg); !errors.Is(err, ErrProtocol) {
				t.Fatalf("err = %v, want ErrProtocol", err)
			}
		})
	}
}

func TestEnrol(t *testing.T) {
	f := newFake(t)
	const challenge = "abcdefghijklmnopqrstuv"
	f.handle("POST /v1/relay/challenge", func(w http.ResponseWriter, _ *http.Request, body []byte) {
		var req mbx.ChallengeRequest
		if err := json.Unmarshal(body, &req); err != nil || req.Host != "alpha" || req.Pubkey != f.hostKey.PublicKey() {
			t.Errorf("challenge request %s: %v", body, err)
		}
		writeJSON(w, 200, mbx.ChallengeResponse{Challenge: challenge})
	})
	var got mbx.EnrolRequest
	f.handle("POST /v1/relay/enrol", func(w http.ResponseWriter, _ *http.Request, body []byte) {
		if err := json.Unmarshal(body, &got); err != nil {
			t.Errorf("enrol body: %v", err)
		}
		if err := mbx.CheckEnrolment(got, challenge); err != nil {
			writeJSON(w, 400, mbx.ErrorResponse{Error: err.Error()})
			return
		}
		writeJSON(w, 200, mbx.OKResponse{OK: true})
	})
	c := f.client(t)
	if err := c.Enrol(bg, "1a2b-3c4d", "tok"); err != nil {
		t.Fatal(err)
	}
	if got.OwnerFP != "1a2b-3c4d" || got.Proof != "tok" {
		t.Fatalf("enrol request %+v, want the owner fp and the proof", got)
	}

	// A relay that refuses the enrolment, and one that answers 200 without ok.
	f.handle("POST /v1/relay/enrol", func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		writeJSON(w, 403, mbx.ErrorResponse{Error: "host key is revoked"})
	})
	if err := c.Enrol(bg, "", ""); !errors.Is(err, ErrForbidden) || !errors.Is(err, ErrRefused) || Retryable(err) {
		t.Fatalf("revoked: err = %v, want ErrForbidden, ErrRefused, not retryable", err)
	}
	f.handle("POST /v1/relay/enrol", func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		writeJSON(w, 200, map[string]any{"ok": false})
	})
	if err := c.Enrol(bg, "", ""); !errors.Is(err, ErrRefused) {
		t.Fatalf("200 without ok: err = %v, want ErrRefused", err)
	}
}

func TestPublishEncAdChecked(t *testing.T) {
	f := newFake(t)
	enc := encKeyFor(t, 1)
	var got mbx.EncAdPublish
	f.handle("POST /v2/relay/enc-key", func(w http.ResponseWriter, r *http.Request, body []byte) {
		_ = json.Unmarshal(body, &got)
		if f.last().hopErr != nil {
			writeJSON(w, 401, mbx.ErrorResponse{Error: "bad relay hop"})
			return
		}
		if _, err := mbx.CheckEncAd(got.Ad, got.Sig, mbx.EncAdPeer{Host: "alpha", HostPubkey: f.hostKey.PublicKey()}, t0); err != nil {
			writeJSON(w, 400, mbx.ErrorResponse{Error: "enc-key ad refused: " + err.Error()})
			return
		}
		writeJSON(w, 200, mbx.OKResponse{OK: true})
	})
	c := f.client(t)
	ad, err := c.PublishEncAd(bg, enc.PublicKey(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if ad.EncPub != enc.PublicKey() || ad.ExpTime().Sub(ad.IATTime()) != mbx.EncAdTTL {
		t.Fatalf("ad %+v", ad)
	}
	// The relay refuses (its clock says the ad is not valid): an error, not a success.
	f.handle("POST /v2/relay/enc-key", func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		writeJSON(w, 400, mbx.ErrorResponse{Error: "enc-key ad refused: not yet valid"})
	})
	_, err = c.PublishEncAd(bg, enc.PublicKey(), 0)
	var se *StatusError
	if !errors.Is(err, ErrRefused) || !errors.As(err, &se) || !strings.Contains(se.Message, "not yet valid") {
		t.Fatalf("refused publish: err = %v, want ErrRefused with the relay's reason", err)
	}
	f.handle("POST /v2/relay/enc-key", func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		writeJSON(w, 200, map[string]any{})
	})
	if _, err := c.PublishEncAd(bg, enc.PublicKey(), 0); !errors.Is(err, ErrRefused) {
		t.Fatalf("200 without ok: err = %v, want ErrRefused", err)
	}
	if _, err := c.PublishEncAd(bg, "not-a-key", 0); !errors.Is(err, ErrInvalid) {
		t.Fatalf("bad enc key: err = %v, want ErrInvalid", err)
	}
}

func TestFetchEncAdRefusals(t *testing.T) {
	peerKey := keyFor(t, 30)
	peer := mbx.EncAdPeer{Host: "beta", HostPubkey: peerKey.PublicKey()}
	enc1, enc2 := encKeyFor(t, 31), encKeyFor(t, 32)
	sign := func(k mbx.SigningKey, host, encPub string, at time.Time, ttl time.Duration) mbx.EncKeyAnswer {
		ad, sig, err := mbx.SignEncAdV2(host, k, encPub, at, ttl)
		if err != nil {
			t.Fatal(err)
		}
		pub, _ := ad.Publish(sig)
		return mbx.EncKeyAnswer{Host: host, HostPubkey: k.PublicKey(), EncPub: &encPub, Ad: pub.Ad, AdSig: &sig}
	}
	newer, _, _ := mbx.SignEncAdV2("beta", peerKey, enc2.PublicKey(), t0.Add(-time.Hour), 0)
	tampered := sign(peerKey, "beta", enc1.PublicKey(), t0, 0)
	other := enc2.PublicKey()
	tampered.EncPub = &other
	v1 := func() mbx.EncKeyAnswer {
		_, sig, _ := mbx.SignEncAdV1("beta", peerKey, enc1.PublicKey())
		e := enc1.PublicKey()
		return mbx.EncKeyAnswer{Host: "beta", HostPubkey: peerKey.PublicKey(), EncPub: &e, Sig: &sig}
	}()

	tests := []struct {
		name    string
		answer  mbx.EncKeyAnswer
		status  int
		newest  *mbx.EncAd
		wantErr error
		wantEnc string
	}{
		{"valid", sign(peerKey, "beta", enc1.PublicKey(), t0.Add(-time.Minute), 0), 200, nil, nil, enc1.PublicKey()},
		{"expired", sign(peerKey, "beta", enc1.PublicKey(), t0.Add(-31*24*time.Hour), 0), 200, nil, mbx.ErrEncAdExpired, ""},
		{"from the future", sign(peerKey, "beta", enc1.PublicKey(), t0.Add(10*time.Minute), 0), 200, nil, mbx.ErrEncAdNotYetValid, ""},
		{"lifetime", sign(peerKey, "beta", enc1.PublicKey(), t0, 91*24*time.Hour), 200, nil, mbx.ErrEncAdLifetime, ""},
		{"signed by another host", sign(keyFor(t, 33), "beta", enc1.PublicKey(), t0, 0), 200, nil, mbx.ErrEncAdWrongPeer, ""},
		{"another host name", sign(peerKey, "gamma", enc1.PublicKey(), t0, 0), 200, nil, mbx.ErrEncAdWrongPeer, ""},
		{"served key differs", tampered, 200, nil, mbx.ErrEncAdTampered, ""},
		{"v1 only", v1, 200, nil, mbx.ErrEncAdUnexpiring, ""},
		{"rolled back", sign(peerKey, "beta", enc1.PublicKey(), t0.Add(-2*time.Hour), 0), 200, &newer, mbx.ErrEncAdRolledBack, ""},
		{"no ad", mbx.EncKeyAnswer{}, 404, nil, ErrNotFound, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t)
			f.handle("GET /v2/relay/enc-key", func(w http.ResponseWriter, r *http.Request, _ []byte) {
				if r.URL.Query().Get("pubkey") != peerKey.PublicKey() {
					t.Errorf("asked for pubkey %q", r.URL.Query().Get("pubkey"))
				}
				if tc.status != 200 {
					writeJSON(w, tc.status, mbx.ErrorResponse{Error: "not found"})
					return
				}
				writeJSON(w, 200, tc.answer)
			})
			enc, ad, err := f.client(t).FetchEncAd(bg, peer, tc.newest)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				}
				if tc.status == 200 && !errors.Is(err, ErrProtocol) {
					t.Fatalf("err = %v, want it to wrap ErrProtocol too", err)
				}
				return
			}
			if err != nil || enc != tc.wantEnc || ad.EncPub != tc.wantEnc {
				t.Fatalf("got %q (%+v), %v; want %q", enc, ad, err, tc.wantEnc)
			}
		})
	}
}

func TestPublishSenders(t *testing.T) {
	f := newFake(t)
	peers := []string{keyFor(t, 40).PublicKey(), keyFor(t, 41).PublicKey(), keyFor(t, 40).PublicKey()}
	var got mbx.SendersPublish
	f.handle("POST /v2/relay/senders", func(w http.ResponseWriter, _ *http.Request, body []byte) {
		_ = json.Unmarshal(body, &got)
		if _, err := mbx.CheckSenderList(got.List, got.Sig, f.hostKey.PublicKey(), t0, time.Time{}); err != nil || f.last().hopErr != nil {
			writeJSON(w, 400, mbx.ErrorResponse{Error: "sender list refused"})
			return
		}
		writeJSON(w, 200, mbx.OKResponse{OK: true})
	})
	c := f.client(t)
	l, err := c.PublishSenders(bg, peers)
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Senders) != 2 {
		t.Fatalf("senders %v, want the 2 distinct keys", l.Senders)
	}
	f.handle("POST /v2/relay/senders", func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		writeJSON(w, 409, mbx.ErrorResponse{Error: "a newer sender list is already stored"})
	})
	if _, err := c.PublishSenders(bg, peers); !errors.Is(err, ErrRefused) || errors.Is(err, ErrEpochChanged) {
		t.Fatalf("stale list: err = %v, want ErrRefused (and no epoch change)", err)
	}
	if _, err := c.PublishSenders(bg, []string{"nope"}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("bad sender: err = %v, want ErrInvalid", err)
	}
}

func TestRotate(t *testing.T) {
	f := newFake(t)
	next := keyFor(t, 60)
	rot, err := mbx.SignRotation("alpha", f.hostKey, next, encKeyFor(t, 61).PublicKey(), t0)
	if err != nil {
		t.Fatal(err)
	}
	f.handle("POST /v2/relay/rotate", func(w http.ResponseWriter, r *http.Request, body []byte) {
		var req mbx.RotateRequest
		_ = json.Unmarshal(body, &req)
		if _, err := mbx.CheckRotation(req.Rotation, f.hostKey.PublicKey()); err != nil {
			writeJSON(w, 400, mbx.ErrorResponse{Error: err.Error()})
			return
		}
		writeJSON(w, 200, mbx.RotateResponse{Moved: 4})
	})
	c := f.client(t)
	res, err := c.Rotate(bg, rot)
	if err != nil || res.Moved != 4 {
		t.Fatalf("rotate = %+v, %v", res, err)
	}
	n := f.count()
	bad := rot
	bad.NewSig = rot.OldSig
	if _, err := c.Rotate(bg, bad); !errors.Is(err, ErrInvalid) || f.count() != n {
		t.Fatalf("badly signed rotation: err = %v (sent %d requests), want ErrInvalid and nothing sent", err, f.count()-n)
	}
}

func TestErrorClassesAndRetryable(t *testing.T) {
	tests := []struct {
		status    int
		body      string
		header    map[string]string
		want      []error
		retryable bool
	}{
		{500, `{"error":"internal error"}`, nil, []error{ErrStatus}, true},
		{503, `{"error":"relay store unavailable, retry"}`, map[string]string{"Retry-After": "7"}, []error{ErrStatus}, true},
		{401, `{"error":"not enrolled"}`, nil, []error{ErrStatus, ErrRefused, ErrNotEnrolled}, false},
		{403, `{"error":"revoked"}`, nil, []error{ErrStatus, ErrRefused, ErrForbidden}, false},
		{429, `{"error":"rate"}`, map[string]string{"Retry-After": "30"}, []error{ErrStatus, ErrRefused, ErrRateLimited}, true},
		{413, `{"error":"too large"}`, nil, []error{ErrStatus, ErrRefused}, false},
		{400, `not json at all`, nil, []error{ErrStatus, ErrRefused}, false},
		{409, `{"error":"stale","code":"EPOCH","epoch":"ep-9"}`, nil, []error{ErrStatus, ErrEpochChanged}, false},
		{302, ``, map[string]string{"Location": "https://elsewhere.example/"}, []error{ErrStatus}, false},
	}
	for _, tc := range tests {
		t.Run(http.StatusText(tc.status), func(t *testing.T) {
			f := newFake(t)
			f.handle("GET /v2/relay/items", func(w http.ResponseWriter, _ *http.Request, _ []byte) {
				for k, v := range tc.header {
					w.Header().Set(k, v)
				}
				w.WriteHeader(tc.status)
				_, _ = w.Write([]byte(tc.body))
			})
			_, err := f.client(t).Pull(bg, PullRequest{After: 1})
			for _, want := range tc.want {
				if !errors.Is(err, want) {
					t.Errorf("err = %v, want it to wrap %v", err, want)
				}
			}
			if errors.Is(err, ErrTransport) || errors.Is(err, ErrProtocol) {
				t.Errorf("err = %v: an error status is not a transport or protocol error", err)
			}
			if got := Retryable(err); got != tc.retryable {
				t.Errorf("Retryable(%v) = %v, want %v", err, got, tc.retryable)
			}
			var se *StatusError
			if ra := tc.header["Retry-After"]; ra != "" && (!errors.As(err, &se) || se.RetryAfter == 0) {
				t.Errorf("Retry-After %s not read: %v", ra, err)
			}
		})
	}

	// No answer at all.
	f := newFake(t)
	c := f.client(t)
	f.srv.Close()
	_, err := c.Pull(bg, PullRequest{})
	if !errors.Is(err, ErrTransport) || !Retryable(err) {
		t.Fatalf("closed server: err = %v, want a retryable ErrTransport", err)
	}
	// A cancelled context is still a transport error, and says so.
	f2 := newFake(t)
	ctx, cancel := context.WithCancel(bg)
	cancel()
	if _, err := f2.client(t).Info(ctx); !errors.Is(err, ErrTransport) || !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: err = %v, want ErrTransport wrapping context.Canceled", err)
	}
}

func TestNewRefusesBadInput(t *testing.T) {
	k := keyFor(t, 1)
	good := Pin{URL: "https://r.example", RelayKey: k.PublicKey()}
	tests := []struct {
		name string
		pin  Pin
		host string
		key  mbx.SigningKey
	}{
		{"unnormalized url", Pin{URL: "https://r.example/", RelayKey: k.PublicKey()}, "alpha", k},
		{"no relay key", Pin{URL: "https://r.example"}, "alpha", k},
		{"no host key", good, "alpha", mbx.SigningKey{}},
		{"no host", good, "", k},
	}
	for _, tc := range tests {
		if _, err := New(tc.pin, tc.host, tc.key, nil); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", tc.name, err)
		}
	}
}

func TestPlainRemote(t *testing.T) {
	for u, want := range map[string]bool{
		"http://relay.example.com":     true,
		"http://192.168.1.20:7374":     true,
		"https://relay.example.com":    false,
		"http://127.0.0.1:7374":        false,
		"http://127.8.9.10:7374":       false,
		"http://localhost:7374":        false,
		"http://[::1]:7374":            false,
		"HTTP://relay.example.com/pre": true,
	} {
		if got := PlainRemote(u); got != want {
			t.Errorf("PlainRemote(%q) = %v, want %v", u, got, want)
		}
	}
}
