package host

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/host/card"
	"github.com/agentmbx/agentmbx/internal/testkit"
	"github.com/agentmbx/agentmbx/mbx"
)

// pairTestHost creates and opens a host named name with its own clock and log.
func pairTestHost(t *testing.T, name string, clock *testkit.Clock) (*Host, *testkit.SyncBuffer) {
	t.Helper()
	dir := t.TempDir()
	if err := Init(dir, InitOptions{Host: name, Clock: clock.Now}); err != nil {
		t.Fatalf("init %s: %v", name, err)
	}
	lg := &testkit.SyncBuffer{}
	h, err := Open(dir, &Options{Clock: clock.Now, Logger: slog.New(slog.NewTextHandler(lg, nil))})
	if err != nil {
		t.Fatalf("open %s: %v", name, err)
	}
	t.Cleanup(func() { h.Close() })
	return h, lg
}

func TestCardRoundTrip(t *testing.T) {
	clock := newClock()
	h, _ := pairTestHost(t, "alpha", clock)
	for _, addr := range []string{"192.168.1.20:7373", "", "alpha.local:7000", "[fe80::1]:7373"} {
		t.Run("addr="+addr, func(t *testing.T) {
			card, err := h.Card(context.Background(), addr)
			if err != nil {
				t.Fatalf("Card(%q): %v", addr, err)
			}
			got, err := ParseCard(card, clock.Now())
			if err != nil {
				t.Fatalf("ParseCard: %v\n%s", err, card)
			}
			want := PeerRecord{Host: "alpha", HostPubkey: h.Key().PublicKey(), EncPub: h.EncKey().PublicKey(), Addr: addr}
			if got.Host != want.Host || got.HostPubkey != want.HostPubkey || got.EncPub != want.EncPub || got.Addr != want.Addr {
				t.Errorf("ParseCard = %+v, want %+v", got, want)
			}
			if err := got.Validate(); err != nil {
				t.Errorf("parsed card does not validate as a peer: %v", err)
			}
			// Whitespace and key order do not matter: the signature covers the canonical form.
			compact, err := mbx.CanonicalJSON(card)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := ParseCard(compact, clock.Now()); err != nil {
				t.Errorf("canonical form of the card refused: %v", err)
			}
			var shape struct {
				Card map[string]any `json:"card"`
				Sig  string         `json:"sig"`
			}
			if err := json.Unmarshal(card, &shape); err != nil {
				t.Fatal(err)
			}
			if _, has := shape.Card["addr"]; has != (addr != "") {
				t.Errorf("card has addr = %v, want %v", has, addr != "")
			}
			if shape.Card["at"] != mbx.ISOTime(clock.Now()) || shape.Card["type"] != CardType || shape.Sig == "" {
				t.Errorf("card at/type/sig = %v/%v/%q", shape.Card["at"], shape.Card["type"], shape.Sig)
			}
		})
	}
}

func TestCardBadAddr(t *testing.T) {
	h, _ := pairTestHost(t, "alpha", newClock())
	for _, addr := range []string{"nohost", ":7373", "host:0", "host:65536", "host:07373", "host:x", "a b:1"} {
		if _, err := h.Card(context.Background(), addr); !errors.Is(err, api.ErrInvalid) {
			t.Errorf("Card(%q) err = %v, want api.ErrInvalid", addr, err)
		}
	}
}

// resign re-signs a card body tree with k, as a forger holding k would.
func resign(t *testing.T, k mbx.SigningKey, card map[string]any) []byte {
	t.Helper()
	in, err := mbx.Canonical(card)
	if err != nil {
		t.Fatal(err)
	}
	out, err := json.Marshal(map[string]any{"card": card, "sig": k.Sign(in)})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestParseCardRefuses(t *testing.T) {
	clock := newClock()
	now := clock.Now()
	k, err := mbx.GenerateSigningKey(strings.NewReader(strings.Repeat("k", 64)))
	if err != nil {
		t.Fatal(err)
	}
	other, err := mbx.GenerateSigningKey(strings.NewReader(strings.Repeat("o", 64)))
	if err != nil {
		t.Fatal(err)
	}
	ek, err := mbx.GenerateEncKey(strings.NewReader(strings.Repeat("e", 64)))
	if err != nil {
		t.Fatal(err)
	}
	body := func() map[string]any {
		return map[string]any{"v": 1, "type": CardType, "host": "alpha", "host_pubkey": k.PublicKey(),
			"enc_pub": ek.PublicKey(), "addr": "10.0.0.1:7373", "at": mbx.ISOTime(now)}
	}
	good := resign(t, k, body())
	if _, err := ParseCard(good, now); err != nil {
		t.Fatalf("baseline card refused: %v", err)
	}
	with := func(f func(m map[string]any)) []byte {
		m := body()
		f(m)
		return resign(t, k, m)
	}
	tamper := func(f func(m map[string]any)) []byte {
		var top map[string]any
		if err := json.Unmarshal(good, &top); err != nil {
			t.Fatal(err)
		}
		f(top["card"].(map[string]any))
		out, _ := json.Marshal(top)
		return out
	}
	cases := []struct {
		name string
		data []byte
		want error
	}{
		{"not json", []byte("card"), card.ErrMalformed},
		{"empty", nil, card.ErrMalformed},
		{"array", []byte(`[1]`), card.ErrMalformed},
		{"trailing data", append(append([]byte{}, good...), []byte(" {}")...), card.ErrMalformed},
		{"no sig", []byte(`{"card":{}}`), card.ErrMalformed},
		{"extra top field", func() []byte {
			var top map[string]any
			json.Unmarshal(good, &top)
			top["note"] = "hi"
			b, _ := json.Marshal(top)
			return b
		}(), card.ErrMalformed},
		{"too large", append(bytes.Repeat([]byte(" "), MaxCardBytes), good...), card.ErrMalformed},
		{"version 2", with(func(m map[string]any) { m["v"] = 2 }), card.ErrMalformed},
		{"version string", with(func(m map[string]any) { m["v"] = "1" }), card.ErrMalformed},
		{"wrong type", with(func(m map[string]any) { m["type"] = "enc-ad" }), card.ErrMalformed},
		{"bad host name", with(func(m map[string]any) { m["host"] = "-alpha" }), card.ErrMalformed},
		{"host name too long", with(func(m map[string]any) { m["host"] = strings.Repeat("a", 64) }), card.ErrMalformed},
		{"host not a string", with(func(m map[string]any) { m["host"] = 7 }), card.ErrMalformed},
		{"short host key", with(func(m map[string]any) { m["host_pubkey"] = k.PublicKey()[:40] }), card.ErrMalformed},
		{"url-safe enc key", with(func(m map[string]any) {
			m["enc_pub"] = strings.NewReplacer("+", "-", "/", "_").Replace(mbx.B64(bytes.Repeat([]byte{0xfb}, 32)))
		}), card.ErrMalformed},
		{"missing enc key", with(func(m map[string]any) { delete(m, "enc_pub") }), card.ErrMalformed},
		{"extra field", with(func(m map[string]any) { m["relay"] = "x" }), card.ErrMalformed},
		{"addr without port", with(func(m map[string]any) { m["addr"] = "10.0.0.1" }), card.ErrMalformed},
		{"addr without host", with(func(m map[string]any) { m["addr"] = ":7373" }), card.ErrMalformed},
		{"addr not a string", with(func(m map[string]any) { m["addr"] = nil }), card.ErrMalformed},
		{"at not a time", with(func(m map[string]any) { m["at"] = "yesterday" }), card.ErrMalformed},
		{"tampered host", tamper(func(m map[string]any) { m["host"] = "mallory" }), card.ErrSignature},
		{"tampered enc key", tamper(func(m map[string]any) { m["enc_pub"] = other.PublicKey() }), card.ErrSignature},
		{"tampered addr", tamper(func(m map[string]any) { m["addr"] = "10.6.6.6:7373" }), card.ErrSignature},
		{"addr removed", tamper(func(m map[string]any) { delete(m, "addr") }), card.ErrSignature},
		{"host key swapped", tamper(func(m map[string]any) { m["host_pubkey"] = other.PublicKey() }), card.ErrSignature},
		{"signed by another key", func() []byte {
			m := body()
			in, _ := mbx.Canonical(m)
			b, _ := json.Marshal(map[string]any{"card": m, "sig": other.Sign(in)})
			return b
		}(), card.ErrSignature},
		{"6 minutes ahead", with(func(m map[string]any) { m["at"] = mbx.ISOTime(now.Add(6 * time.Minute)) }), card.ErrFuture},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := ParseCard(c.data, now)
			if !errors.Is(err, c.want) {
				t.Fatalf("ParseCard err = %v, want %v", err, c.want)
			}
			if !reflect.DeepEqual(got, PeerRecord{}) {
				t.Errorf("ParseCard returned %+v with its error", got)
			}
		})
	}
}

func TestParseCardClockSkew(t *testing.T) {
	clock := newClock()
	h, _ := pairTestHost(t, "alpha", clock)
	now := clock.Now()
	clock.Advance(4 * time.Minute) // the card's host runs 4 minutes ahead: still fine
	ahead, _ := h.Card(context.Background(), "")
	if _, err := ParseCard(ahead, now); err != nil {
		t.Errorf("card 4 minutes ahead refused: %v", err)
	}
	clock.Advance(2 * time.Minute) // 6 minutes ahead
	future, _ := h.Card(context.Background(), "")
	if _, err := ParseCard(future, now); !errors.Is(err, card.ErrFuture) {
		t.Errorf("card 6 minutes ahead: err = %v, want card.ErrFuture", err)
	}
	// An old card is fine: the reader checks the fingerprint, not the age.
	if _, err := ParseCard(ahead, now.Add(400*24*time.Hour)); err != nil {
		t.Errorf("old card refused: %v", err)
	}
}

// TestAddPeerFromCard pins through api.Service.AddPeer, which reads cards with ParseCard.
func TestAddPeerFromCard(t *testing.T) {
	ctx := context.Background()
	clock := newClock()
	a, _ := pairTestHost(t, "alpha", clock)
	b, _ := pairTestHost(t, "beta", clock)
	signed, err := b.Card(context.Background(), "10.0.0.2:7373")
	if err != nil {
		t.Fatal(err)
	}
	bad := bytes.Replace(signed, []byte(`"beta"`), []byte(`"betb"`), 1)
	if _, err := a.AddPeer(ctx, bad); !errors.Is(err, card.ErrSignature) {
		t.Fatalf("AddPeer(tampered) err = %v, want card.ErrSignature", err)
	}
	if ps, _ := a.Peers(ctx); len(ps) != 0 {
		t.Fatalf("tampered card pinned %v", ps)
	}
	p, err := a.AddPeer(ctx, signed)
	if err != nil {
		t.Fatalf("AddPeer: %v", err)
	}
	if p.Host != "beta" || p.HostPubkey != b.Key().PublicKey() || p.EncPub != b.EncKey().PublicKey() ||
		p.Addr != "10.0.0.2:7373" || p.Fingerprint != b.Key().Fingerprint() {
		t.Errorf("AddPeer = %+v", p)
	}
	own, _ := a.Card(context.Background(), "")
	if _, err := a.AddPeer(ctx, own); !errors.Is(err, api.ErrSelf) {
		t.Errorf("AddPeer(own card) err = %v, want api.ErrSelf", err)
	}
}

func makeCard(host string, k mbx.SigningKey, encPub, addr string, now time.Time) ([]byte, error) {
	return card.Make(host, k, encPub, addr, now)
}

func FuzzParseCard(f *testing.F) {
	clock := newClock()
	k, _ := mbx.GenerateSigningKey(strings.NewReader(strings.Repeat("k", 64)))
	ek, _ := mbx.GenerateEncKey(strings.NewReader(strings.Repeat("e", 64)))
	good, _ := makeCard("alpha", k, ek.PublicKey(), "10.0.0.1:7373", clock.Now())
	f.Add(good)
	noAddr, _ := makeCard("beta", k, ek.PublicKey(), "", clock.Now())
	f.Add(noAddr)
	f.Add([]byte(`{"card":{"v":1},"sig":"x"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := ParseCard(data, clock.Now())
		if err != nil {
			if !reflect.DeepEqual(p, PeerRecord{}) {
				t.Fatalf("record %+v returned with error %v", p, err)
			}
			return
		}
		// Whatever is accepted is a peer PinPeer takes, and its canonical form is accepted too.
		if err := p.Validate(); err != nil {
			t.Fatalf("accepted card fails peer validation: %v", err)
		}
		canon, err := mbx.CanonicalJSON(data)
		if err != nil {
			t.Fatalf("accepted card has no canonical form: %v", err)
		}
		q, err := ParseCard(canon, clock.Now())
		if err != nil || q.Host != p.Host || q.HostPubkey != p.HostPubkey || q.EncPub != p.EncPub || q.Addr != p.Addr {
			t.Fatalf("canonical form parses to %+v, %v; want %+v", q, err, p)
		}
	})
}
