package mbx

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
)

type expiredCase struct {
	Name        string `json:"name"`
	Expect      string `json:"expect"`
	RelaySeed   string `json:"relay_seed_b64"`
	RelayPubkey string `json:"relay_pubkey"`
	SweepNowMS  int64  `json:"sweep_now_ms"`
	QueuedFor   string `json:"queued_for"`
	Item        *struct {
		Kind         string `json:"kind"`
		ItemID       string `json:"item_id"`
		SenderPubkey string `json:"sender_pubkey"`
	} `json:"item"`
	Notice       json.RawMessage `json:"notice"`
	SigningInput string          `json:"signing_input"`
	Sig          string          `json:"sig"`
	Wire         string          `json:"wire"`
	WireSHA256   string          `json:"wire_sha256"`
	Pinned       string          `json:"pinned_relay_pubkey"`
	FromSender   string          `json:"from_sender_pubkey"`
	Result       json.RawMessage `json:"result"`
	Checks       struct {
		Apply string `json:"applyExpiryNotice_check"`
	} `json:"checks"`
}

// expiryRefusals names the reason Go gives for each forged notice (the original says "bad expiry
// notice" for all of them).
var expiryRefusals = map[string]error{
	"tampered expired_at":           ErrExpirySignature,
	"tampered target_pubkey":        ErrExpirySignature,
	"signed by another key":         ErrExpirySignature,
	"type other than relay-expired": ErrExpiryMalformed,
	"v 2":                           ErrExpiryMalformed,
	"item pushed by a sender other than the pinned relay key": ErrExpirySender,
}

func TestRelayExpiredVectors(t *testing.T) {
	cases := loadCases[expiredCase](t, "relay_expired.json")
	var n struct{ notices, forged, reports int }
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			switch {
			case c.Result != nil:
				// The sweep's unsigned report: SweepReport carries every field.
				n.reports++
				var r SweepReport
				dec := json.NewDecoder(bytes.NewReader(c.Result))
				dec.DisallowUnknownFields()
				if err := dec.Decode(&r); err != nil {
					t.Fatal(err)
				}
				got, _ := Canonical(r)
				want, _ := CanonicalJSON(c.Result)
				if string(got) != string(want) || r.Type != "relay-sweep" {
					t.Errorf("sweep report:\n got %s\nwant %s", got, want)
				}
				return
			case c.Expect == "invalid":
				n.forged++
				_, err := CheckExpiryNotice([]byte(c.Wire), c.FromSender, c.Pinned)
				if c.Checks.Apply != "rejected:bad expiry notice" {
					t.Fatalf("unexpected verdict %q", c.Checks.Apply)
				}
				want, ok := expiryRefusals[c.Name]
				if !ok || !errors.Is(err, want) || !errors.Is(err, ErrBadExpiryNotice) {
					t.Errorf("got %v, want %v", err, want)
				}
				return
			}
			n.notices++
			relay := mustKey(t, c.RelaySeed)
			var want ExpiryNotice
			if err := json.Unmarshal(c.Notice, &want); err != nil {
				t.Fatal(err)
			}
			accepted, err := ParseISOTime(want.AcceptedAt)
			if err != nil {
				t.Fatal(err)
			}
			s, err := SignExpiryNotice(relay, want.ItemID, want.TargetPubkey, accepted, ms(c.SweepNowMS))
			if err != nil {
				t.Fatal(err)
			}
			if in, _ := s.Notice.SigningInput(); string(in) != c.SigningInput || s.Sig != c.Sig {
				t.Errorf("notice:\n got %s %s\nwant %s %s", in, s.Sig, c.SigningInput, c.Sig)
			}
			wire, err := s.Wire()
			if err != nil {
				t.Fatal(err)
			}
			if string(wire) != c.Wire || WireHash(wire) != c.WireSHA256 {
				t.Errorf("wire:\n got %s\nwant %s", wire, c.Wire)
			}
			if got := s.Notice.NoticeItemID(); got != c.Item.ItemID || c.Item.Kind != ItemKindExpired {
				t.Errorf("item id: got %s, want %s", got, c.Item.ItemID)
			}
			got, err := CheckExpiryNotice([]byte(c.Wire), c.Item.SenderPubkey, c.RelayPubkey)
			if c.Checks.Apply != "ok" || err != nil {
				t.Errorf("check: got %v, want %q", err, c.Checks.Apply)
			}
			if got != want {
				t.Errorf("checked notice: got %+v, want %+v", got, want)
			}
		})
	}
	t.Logf("relay_expired.json: %d notices signed byte for byte and checked, %d forged refused, %d sweep report round-tripped", n.notices, n.forged, n.reports)
}

func TestCheckExpiryNoticeShapes(t *testing.T) {
	relay := mustKey(t, "gJF5o9gf/v4qi64gPljpuYZs+9rY3eR++q/A1IpZ7ao=")
	for _, c := range []struct {
		name         string
		wire         string
		from, pinned string
		want         error
	}{
		{"no pinned key", `{}`, "", "", ErrExpirySender},
		{"not JSON", `{`, relay.PublicKey(), relay.PublicKey(), ErrExpiryMalformed},
		{"no notice", `{"sig":"x"}`, relay.PublicKey(), relay.PublicKey(), ErrExpiryMalformed},
		{"no sig", `{"notice":{"v":1,"type":"relay-expired","item_id":"a","target_pubkey":"b","accepted_at":"c","expired_at":"d"}}`, relay.PublicKey(), relay.PublicKey(), ErrExpiryMalformed},
		{"item_id a number", `{"notice":{"v":1,"type":"relay-expired","item_id":1,"target_pubkey":"b","accepted_at":"c","expired_at":"d"},"sig":"x"}`, relay.PublicKey(), relay.PublicKey(), ErrExpiryMalformed},
		{"bad sig", `{"notice":{"v":1,"type":"relay-expired","item_id":"a","target_pubkey":"b","accepted_at":"c","expired_at":"d"},"sig":"x"}`, relay.PublicKey(), relay.PublicKey(), ErrExpirySignature},
	} {
		if _, err := CheckExpiryNotice([]byte(c.wire), c.from, c.pinned); !errors.Is(err, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, err, c.want)
		}
	}
}

// FuzzCheckExpiryNotice: nothing panics, refusals are typed, and an accepted notice without
// unknown fields re-encodes to its signing input.
func FuzzCheckExpiryNotice(f *testing.F) {
	cases := loadCases[expiredCase](f, "relay_expired.json")
	relay := cases[0].RelayPubkey
	for _, c := range cases {
		if c.Wire != "" {
			f.Add([]byte(c.Wire))
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		n, err := CheckExpiryNotice(data, relay, relay)
		if err != nil {
			if !errors.Is(err, ErrBadExpiryNotice) {
				t.Fatalf("untyped refusal %v", err)
			}
			return
		}
		m, _ := parseObject(data)
		checkSignedBytes(t, m["notice"].(map[string]any), 6, n.SigningInput, "notice")
	})
}
