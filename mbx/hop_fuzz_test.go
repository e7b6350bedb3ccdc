package mbx

import (
	"bytes"
	"crypto/ed25519"
	"strconv"
	"strings"
	"testing"
	"time"
)

// relayHopInputRef is RelayHopInput as first written: the lossy JSON string of the joined parts.
func relayHopInputRef(method, path, ts string, body []byte) []byte {
	b := []byte(`{"body":`)
	b = appendJSStringLossy(b, method+":"+path+":"+ts+":"+string(body))
	b = append(b, `,"method":`...)
	b = appendJSStringLossy(b, method)
	b = append(b, `,"path":`...)
	b = appendJSStringLossy(b, path)
	b = append(b, `,"ts":`...)
	b = appendJSStringLossy(b, ts)
	return append(b, '}')
}

// Whatever the parts, the one-pass hop input is the bytes of the reference, so every signature
// made or checked before still verifies.
func FuzzRelayHopInput(f *testing.F) {
	f.Add("POST", "/v2/relay/items", "1773480413589", []byte(`{"items":[{"kind":"envelope","item_id":"a\"b"}]}`))
	f.Add("GET", "/v2/relay/items?after=0&limit=500", "1", []byte(nil))
	f.Add("POST", "/p\xff", "t\x00", []byte("\xed\xa0\x80 tab\t nl\n \\ \x7f \u2028 é \xc3"))
	f.Add("P\xc3", "\xa9/x", "ts", []byte("\xc3"))
	f.Fuzz(func(t *testing.T, method, path, ts string, body []byte) {
		got, want := RelayHopInput(method, path, ts, body), relayHopInputRef(method, path, ts, body)
		if !bytes.Equal(got, want) {
			t.Fatalf("RelayHopInput(%q, %q, %q, %q)\n got %q\nwant %q", method, path, ts, body, got, want)
		}
	})
}

// BenchmarkVerifyRelayHop is the relay's check of a hop over a 1-item and a 200-item push body,
// beside ed25519.Verify of the same input alone: what the hop adds to the signature check.
func BenchmarkVerifyRelayHop(b *testing.B) {
	key, err := GenerateSigningKey(strings.NewReader(strings.Repeat("k", 32)))
	if err != nil {
		b.Fatal(err)
	}
	now := time.UnixMilli(1773480413589)
	item := `{"kind":"envelope","item_id":"01HXAMPLE","targets":[{"host_pubkey":"` + key.PublicKey() +
		`","wire_b64":"` + strings.Repeat("QUJD", 150) + `"}]}`
	for _, n := range []int{1, 200} {
		body := []byte(`{"items":[` + strings.Repeat(item+",", n-1) + item + `]}`)
		h := SignRelayHop(key, "alpha", "POST", "/v2/relay/items", body, now, true)
		b.Run("items="+strconv.Itoa(n), func(b *testing.B) {
			for b.Loop() {
				if err := VerifyRelayHop(key.PublicKey(), h, "POST", "/v2/relay/items", body, now); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("items="+strconv.Itoa(n)+"/ed25519-only", func(b *testing.B) {
			in := RelayHopInput("POST", "/v2/relay/items", h.Get(HeaderTS), body)
			pub, sig := key.priv.Public().(ed25519.PublicKey), mustB64(b, h.Get(HeaderSig))
			for b.Loop() {
				if !ed25519.Verify(pub, in, sig) {
					b.Fatal("bad signature")
				}
			}
		})
	}
}

func mustB64(b *testing.B, s string) []byte {
	raw, err := DecodeB64Lenient(s)
	if err != nil {
		b.Fatal(err)
	}
	return raw
}
