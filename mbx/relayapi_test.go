package mbx

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

// Shared helpers of the signed-record tests.

// wantReason checks err against an original verdict: "" (or "ok", "accepted", "valid") means
// accepted; any other text must map to the sentinel reasons gives for it.
func wantReason(t *testing.T, what string, err error, verdict string, reasons map[string]error) {
	t.Helper()
	switch verdict {
	case "", "ok", "accepted", "valid":
		if err != nil {
			t.Errorf("%s: got %v, want accepted", what, err)
		}
		return
	}
	want, ok := reasons[verdict]
	if !ok {
		for prefix, e := range reasons {
			if strings.HasSuffix(prefix, "*") && strings.HasPrefix(verdict, strings.TrimSuffix(prefix, "*")) {
				want, ok = e, true
			}
		}
	}
	if !ok {
		t.Fatalf("%s: no Go reason mapped for the original's %q", what, verdict)
	}
	if !errors.Is(err, want) {
		t.Errorf("%s: got %v, want %v (original: %q)", what, err, want, verdict)
	}
}

// nullableString reads a JSON value that is a string or null.
func nullableString(raw json.RawMessage) (string, bool) {
	var s *string
	if err := json.Unmarshal(raw, &s); err != nil || s == nil {
		return "", false
	}
	return *s, true
}

func ms(n int64) time.Time { return time.UnixMilli(n).UTC() }

func mustKey(t testing.TB, seed string) SigningKey {
	t.Helper()
	k, err := SigningKeyFromSeed(seed)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestDefaultLimitsMatchProtocol(t *testing.T) {
	got, err := json.Marshal(DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	want := `{"max_item_bytes":524288,"max_batch":200,"max_pull":500,"max_pull_bytes":8388608,"max_targets":64,"retention_days":14,"max_queue_items":10000,"max_queue_bytes":52428800,"max_sender_items":2000,"max_sender_bytes":20971520,"max_owner_items":10000,"max_owner_bytes":52428800}`
	if string(got) != want {
		t.Errorf("limits:\n got %s\nwant %s", got, want)
	}
	if d := DefaultLimits().Retention(); d != 14*24*time.Hour {
		t.Errorf("retention: got %v, want 336h", d)
	}
}

func TestJSLenAndCut(t *testing.T) {
	for _, c := range []struct {
		in      string
		n       int
		wantLen int
		wantCut string
	}{
		{"abc", 2, 3, "ab"},
		{"ünï", 2, 3, "ün"},
		{"a🚀b", 2, 4, "a"},  // slice(0,2) would leave a lone high surrogate: the rocket goes
		{"a🚀b", 3, 4, "a🚀"}, // whole pair fits
		{"🚀", 0, 2, ""},
		{"", 5, 0, ""},
	} {
		if got := utf16Len(c.in); got != c.wantLen {
			t.Errorf("utf16Len(%q): got %d, want %d", c.in, got, c.wantLen)
		}
		if got := cutUTF16(c.in, c.n); got != c.wantCut {
			t.Errorf("cutUTF16(%q, %d): got %q, want %q", c.in, c.n, got, c.wantCut)
		}
	}
}

func TestGetSafeInt(t *testing.T) {
	for _, c := range []struct {
		json string
		want int64
		ok   bool
	}{
		{`{"n":1}`, 1, true},
		{`{"n":1.0}`, 1, true},
		{`{"n":1e3}`, 1000, true},
		{`{"n":9007199254740991}`, 9007199254740991, true},
		{`{"n":9007199254740992}`, 0, false},
		{`{"n":-9007199254740992}`, 0, false},
		{`{"n":1.5}`, 0, false},
		{`{"n":"1"}`, 0, false},
		{`{"n":1e400}`, 0, false},
		{`{}`, 0, false},
	} {
		m, ok := parseObject([]byte(c.json))
		if !ok {
			t.Fatalf("parse %s", c.json)
		}
		got, ok := getSafeInt(m, "n")
		if got != c.want || ok != c.ok {
			t.Errorf("getSafeInt(%s): got %d,%v want %d,%v", c.json, got, ok, c.want, c.ok)
		}
	}
}

func TestReasonErrors(t *testing.T) {
	if !errors.Is(ErrEncAdExpired, ErrBadEncAd) || errors.Is(ErrEncAdExpired, ErrBadReceipt) {
		t.Error("ErrEncAdExpired must wrap ErrBadEncAd only")
	}
	if got := ErrRotationOldSig.Error(); got != "rotation is not signed by the pinned host key" {
		t.Errorf("text: got %q", got)
	}
}

func TestInfoCallerEncAdReadings(t *testing.T) {
	const key = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="
	now := time.Date(2026, 3, 14, 9, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name, you    string
		served, held bool
		encPub, v1   string // "" for null
	}{
		{"absent (relay older than 0.5.5)", `{"host":"a","pubkey":"k","head_seq":0,"acked_through":0}`, false, false, "", ""},
		{"null: no ad held", `{"host":"a","pubkey":"k","head_seq":0,"acked_through":0,"enc_ad":null}`, true, false, "", ""},
		{"v1 ad only", `{"host":"a","pubkey":"k","head_seq":0,"acked_through":0,"enc_ad":{"enc_pub":null,"exp":null,"v1":"` + key + `"}}`, true, false, "", key},
		{"v2 ad only", `{"host":"a","pubkey":"k","head_seq":0,"acked_through":0,"enc_ad":{"enc_pub":"` + key + `","exp":"2026-04-13T09:00:00.000Z","v1":null}}`, true, true, key, ""},
		{"both", `{"host":"a","pubkey":"k","head_seq":0,"acked_through":0,"enc_ad":{"enc_pub":"` + key + `","exp":"2026-04-13T09:00:00.000Z","v1":"` + key + `"}}`, true, true, key, key},
		{"expired v2 ad", `{"host":"a","pubkey":"k","head_seq":0,"acked_through":0,"enc_ad":{"enc_pub":"` + key + `","exp":"2026-03-14T08:59:59.999Z","v1":null}}`, true, false, key, ""},
		{"v1 as a boolean (agentmbx relays before the fix)", `{"host":"a","pubkey":"k","head_seq":0,"acked_through":0,"enc_ad":{"enc_pub":"` + key + `","exp":"2026-04-13T09:00:00.000Z","v1":true}}`, true, true, key, ""},
		{"enc_ad of a wrong type", `{"host":"a","pubkey":"k","head_seq":0,"acked_through":0,"enc_ad":"yes"}`, true, false, "", ""},
	} {
		var y InfoCaller
		if err := json.Unmarshal([]byte(c.you), &y); err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		str := func(p *string) string {
			if p == nil {
				return ""
			}
			return *p
		}
		var encPub, v1 string
		if y.EncAd != nil {
			encPub, v1 = str(y.EncAd.EncPub), str(y.EncAd.V1)
		}
		if y.EncAdServed != c.served || y.EncAd.Holds(key, now) != c.held || encPub != c.encPub || v1 != c.v1 {
			t.Errorf("%s: served %v held %v enc_pub %q v1 %q, want %v %v %q %q", c.name,
				y.EncAdServed, y.EncAd.Holds(key, now), encPub, v1, c.served, c.held, c.encPub, c.v1)
		}
	}
	// What we serve: null pointers are JSON null, in 0.5.x's field order.
	k := key
	b, err := json.Marshal(InfoEncAd{V1: &k})
	if want := `{"enc_pub":null,"exp":null,"v1":"` + key + `"}`; err != nil || string(b) != want {
		t.Errorf("marshal = %s %v, want %s", b, err, want)
	}
}
