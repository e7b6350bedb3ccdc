package mbx

import (
	"encoding/json"
	"errors"
	"testing"
	"time"
)

type rotationCase struct {
	Name string `json:"name"`
	// the "keys" case
	Old *struct {
		SeedB64   string `json:"seed_b64"`
		PublicKey string `json:"publicKey"`
	} `json:"old"`
	New *struct {
		SeedB64   string `json:"seed_b64"`
		PublicKey string `json:"publicKey"`
	} `json:"new"`
	NewEnc *struct {
		PublicKey string `json:"publicKey"`
	} `json:"new_enc"`
	IAT string `json:"iat"`
	// the others
	Expect       string          `json:"expect"`
	Signed       json.RawMessage `json:"signed"`
	SigningInput string          `json:"signing_input"`
	Pinned       string          `json:"pinned"`
	AnnounceBody string          `json:"announce_body"`
	Checks       struct {
		CheckRotation *string `json:"checkRotation"`
		RelayRotate   *string `json:"relay_rotate"`
	} `json:"checks"`
}

func TestRotationVectors(t *testing.T) {
	cases := loadCases[rotationCase](t, "rotation.json")
	keys := cases[0]
	if keys.Old == nil || keys.New == nil || keys.NewEnc == nil {
		t.Fatal(`the first case must be "keys"`)
	}
	old, next := mustKey(t, keys.Old.SeedB64), mustKey(t, keys.New.SeedB64)
	iat, err := ParseISOTime(keys.IAT)
	if err != nil {
		t.Fatal(err)
	}
	var n struct{ signed, sigs, checks int }
	for _, c := range cases[1:] {
		t.Run(c.Name, func(t *testing.T) {
			var rec struct {
				Rec json.RawMessage `json:"rec"`
			}
			if err := json.Unmarshal(c.Signed, &rec); err != nil {
				t.Fatal(err)
			}
			// The record names its host; the relay of relay_rotate has the old key enrolled under
			// that same name (the file's notes).
			var named struct {
				Host string `json:"host"`
			}
			if err := json.Unmarshal(rec.Rec, &named); err != nil {
				t.Fatal(err)
			}
			enrolledHost := named.Host
			if in, err := CanonicalJSON(rec.Rec); err != nil || string(in) != c.SigningInput {
				t.Errorf("signing input:\n got %s (%v)\nwant %s", in, err, c.SigningInput)
			}
			if c.Expect == "" {
				n.signed++
				s, err := SignRotation(enrolledHost, old, next, keys.NewEnc.PublicKey, iat)
				if err != nil {
					t.Fatal(err)
				}
				got, err := MarshalJSON(s)
				if err != nil {
					t.Fatal(err)
				}
				want, err := CanonicalJSON(c.Signed)
				if err != nil {
					t.Fatal(err)
				}
				if gotC, _ := CanonicalJSON(got); string(gotC) != string(want) {
					t.Errorf("signed rotation:\n got %s\nwant %s", gotC, want)
				}
				body, err := MarshalJSON(RotateRequest{Rotation: got})
				if err != nil {
					t.Fatal(err)
				}
				if string(body) != c.AnnounceBody {
					t.Errorf("announce body:\n got %s\nwant %s", body, c.AnnounceBody)
				}
			}
			// Every genuine signature in the case is one Go makes too (Ed25519 is deterministic).
			var sigs struct {
				OldSig string `json:"old_sig"`
				NewSig string `json:"new_sig"`
			}
			if err := json.Unmarshal(c.Signed, &sigs); err != nil {
				t.Fatal(err)
			}
			for _, k := range []SigningKey{old, next} {
				for _, sig := range []string{sigs.OldSig, sigs.NewSig} {
					if Verify(k.PublicKey(), []byte(c.SigningInput), sig) {
						n.sigs++
						if got := k.Sign([]byte(c.SigningInput)); got != sig {
							t.Errorf("signature by %v: got %s, want %s", k, got, sig)
						}
					}
				}
			}
			n.checks++
			_, err := CheckRotation(c.Signed, c.Pinned)
			if got, want := reasonText(err), deref(c.Checks.CheckRotation); got != want {
				t.Errorf("checkRotation: got %q, want %q", got, want)
			}
			if want := c.Checks.RelayRotate; want != nil {
				n.checks++
				_, err := RelayCheckRotation(c.Signed, enrolledHost, RotationOldPub(c.Signed))
				got := "ok"
				if err != nil {
					got = err.Error()
				}
				if got != *want {
					t.Errorf("relay rotate: got %q, want %q", got, *want)
				}
			}
		})
	}
	t.Logf("rotation.json: %d cases, %d records and %d signatures made byte for byte, %d verdicts", len(cases), n.signed, n.sigs, n.checks)
}

func TestRotationBeyondVectors(t *testing.T) {
	old := mustKey(t, "cpSvM9EeBH4U8xp2w40Err6TZANeiBdqn1TQC4aj9Ks=")
	next := mustKey(t, "SiTtxlUWlf7tSlep4I19isQjmPDRa+D64cVEcsbop1Q=")
	enc := "Tv8OfTGYlXsR4sVRtx+g6FgPDz/GrkQKHYfFMYOuPgw="
	now := time.Date(2026, 3, 24, 9, 26, 53, 589e6, time.UTC)
	sign := func(rec map[string]any) []byte {
		in, err := Canonical(rec)
		if err != nil {
			t.Fatal(err)
		}
		b, err := json.Marshal(map[string]any{"rec": rec, "old_sig": old.Sign(in), "new_sig": next.Sign(in)})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	rec := func() map[string]any {
		return map[string]any{"v": 1, "type": "host-rotation", "host": "alpha", "old_pub": old.PublicKey(), "new_pub": next.PublicKey(), "new_enc_pub": enc, "iat": ISOTime(now)}
	}
	t.Run("a field both keys signed is kept in the signed bytes", func(t *testing.T) {
		r := rec()
		r["note"] = "x"
		if _, err := CheckRotation(sign(r), old.PublicKey()); err != nil {
			t.Errorf("got %v, want accepted", err)
		}
	})
	t.Run("malformed new enc key", func(t *testing.T) {
		r := rec()
		r["new_enc_pub"] = "AAAA"
		if _, err := CheckRotation(sign(r), old.PublicKey()); !errors.Is(err, ErrRotationEncKey) {
			t.Errorf("got %v, want %v", err, ErrRotationEncKey)
		}
	})
	t.Run("relay: another host name", func(t *testing.T) {
		if _, err := RelayCheckRotation(sign(rec()), "beta", old.PublicKey()); !errors.Is(err, ErrRotationHost) {
			t.Errorf("got %v, want %v", err, ErrRotationHost)
		}
	})
	t.Run("sign to the same key", func(t *testing.T) {
		if _, err := SignRotation("alpha", old, old, enc, now); !errors.Is(err, ErrRotationSameKey) {
			t.Errorf("got %v, want %v", err, ErrRotationSameKey)
		}
	})
	t.Run("old pub of garbage", func(t *testing.T) {
		for _, in := range []string{``, `[]`, `{"rec":1}`, `{"rec":{"old_pub":2}}`} {
			if got := RotationOldPub([]byte(in)); got != "" {
				t.Errorf("RotationOldPub(%s): got %q", in, got)
			}
		}
	})
}

// FuzzCheckRotation: nothing panics, refusals are typed, and an accepted record without unknown
// fields re-encodes to the bytes both signatures cover.
func FuzzCheckRotation(f *testing.F) {
	cases := loadCases[rotationCase](f, "rotation.json")
	pinned := cases[0].Old.PublicKey
	for _, c := range cases[1:] {
		f.Add([]byte(c.Signed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := CheckRotation(data, pinned)
		if err != nil {
			if !errors.Is(err, ErrBadRotation) {
				t.Fatalf("untyped refusal %v", err)
			}
			return
		}
		m, _ := parseObject(data)
		want := checkSignedBytes(t, m["rec"].(map[string]any), 7, s.Rec.SigningInput, "record")
		if !Verify(s.Rec.OldPub, want, s.OldSig) || !Verify(s.Rec.NewPub, want, s.NewSig) {
			t.Fatal("accepted a rotation whose signatures do not verify")
		}
	})
}
