package relayclient_test

import (
	"crypto/rand"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/relayclient"
)

// v1OnlyRelay serves the real relay's v1 API and nothing of v2 (as a 0.5.3-era relay): every
// /v2/ path answers 404.
func v1OnlyRelay(t *testing.T) string {
	t.Helper()
	r := startRelay(t)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if strings.HasPrefix(req.URL.Path, "/v2/") {
			http.Error(w, `{"error":"not found"}`, http.StatusNotFound)
			return
		}
		r.srv.ServeHTTP(w, req)
	}))
	t.Cleanup(ts.Close)
	return ts.URL
}

type v1Host struct {
	name string
	key  mbx.SigningKey
	enc  mbx.EncKey
	c    *relayclient.V1
}

// dialV1 negotiates with the relay as a v2 client does and falls back to v1.
func dialV1(t *testing.T, url, name string, n uint64) v1Host {
	t.Helper()
	proto, _, err := relayclient.Negotiate(bg, url, nil)
	if err != nil || proto != relayclient.ProtocolV1 {
		t.Fatalf("Negotiate = %v, %v; want v1", proto, err)
	}
	k, _ := mbx.GenerateSigningKey(seeded(300 + n))
	e, _ := mbx.GenerateEncKey(seeded(400 + n))
	c, err := relayclient.NewV1(url, name, k, &relayclient.Options{Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Enrol(bg, ""); err != nil {
		t.Fatalf("%s: v1 enrol: %v", name, err)
	}
	if err := c.PublishEncAd(bg, e.PublicKey()); err != nil {
		t.Fatalf("%s: v1 enc-key ad: %v", name, err)
	}
	return v1Host{name: name, key: k, enc: e, c: c}
}

// TestV1FallbackDelivers: against a relay that serves only v1, the client falls back, pushes an
// envelope sealed to the enc key pinned at pairing, and the target pulls, opens and acks it.
func TestV1FallbackDelivers(t *testing.T) {
	url := v1OnlyRelay(t)
	a, b := dialV1(t, url, "alpha", 1), dialV1(t, url, "beta", 2)

	e, err := mbx.Build(mbx.Draft{From: "alice@alpha", To: []string{"bob@beta"}, Subject: "via v1", Body: "over a v1 relay"}, time.Now(), mbx.NewULIDs(rand.Reader))
	if err != nil {
		t.Fatal(err)
	}
	_, wire, err := e.Seal(rand.Reader, b.enc.PublicKey(), a.name, a.key)
	if err != nil {
		t.Fatal(err)
	}
	res, err := a.c.Push(bg, []json.RawMessage{wire})
	if err != nil || res.Stored != 1 || res.Error != "" {
		t.Fatalf("v1 push = %+v, %v", res, err)
	}
	// A retry (the outbox keeps the row: a v1 200 is no acceptance) stores nothing new.
	if res, err := a.c.Push(bg, []json.RawMessage{wire}); err != nil || res.Stored != 1 {
		t.Fatalf("v1 retry = %+v, %v", res, err)
	}
	p, err := b.c.Pull(bg, 0)
	if err != nil || len(p.Items) != 1 || p.Rewound {
		t.Fatalf("v1 pull = %+v, %v; want one item", p, err)
	}
	got, err := mbx.Receive(p.Items[0].Envelope, a.name, a.key.PublicKey(), b.enc)
	if err != nil || got.ID != e.ID || got.Body != e.Body {
		t.Fatalf("opened %+v, %v; want %s", got, err, e.ID)
	}
	if err := b.c.Ack(bg, p.Cursor); err != nil {
		t.Fatal(err)
	}
	if p, err := b.c.Pull(bg, p.Cursor); err != nil || len(p.Items) != 0 {
		t.Fatalf("after the ack: %+v, %v", p, err)
	}
	// A push the relay refuses entirely is an error with its reason, and nothing stored.
	e2, _ := mbx.Build(mbx.Draft{From: "alice@alpha", To: []string{"bob@nowhere"}, Subject: "x", Body: "y"}, time.Now(), mbx.NewULIDs(rand.Reader))
	_, wire2, _ := e2.Seal(rand.Reader, b.enc.PublicKey(), a.name, a.key)
	if _, err := a.c.Push(bg, []json.RawMessage{wire2}); !errors.Is(err, relayclient.ErrRefused) || !strings.Contains(err.Error(), "not enrolled: nowhere") {
		t.Fatalf("push to an unknown host: %v", err)
	}
	// Plaintext never leaves: an unsealed envelope is refused before sending.
	plain, _ := e.Marshal()
	if _, err := a.c.Push(bg, []json.RawMessage{plain}); !errors.Is(err, relayclient.ErrInvalid) {
		t.Fatalf("unsealed push: %v", err)
	}
}

func TestNegotiatePrefersV2(t *testing.T) {
	r := startRelay(t)
	proto, info, err := relayclient.Negotiate(bg, r.url, nil)
	if err != nil || proto != relayclient.ProtocolV2 || info.RelayPubkey != r.key.PublicKey() {
		t.Fatalf("Negotiate = %v %+v %v; want v2 with the relay's key", proto, info, err)
	}
	// No answer is no reason to fall back.
	if _, _, err := relayclient.Negotiate(bg, "http://127.0.0.1:1", &relayclient.Options{Timeout: 2 * time.Second}); err == nil {
		t.Fatal("Negotiate with no relay succeeded")
	}
}
