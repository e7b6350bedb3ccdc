package mbx

import (
	"encoding/json"
	"errors"
	"testing"
	"time"
)

type encAdCase struct {
	Name       string `json:"name"`
	Version    int    `json:"version"`
	Expect     string `json:"expect"`
	Host       string `json:"host"`
	HostPubkey string `json:"host_pubkey"`
	HostSeed   string `json:"host_seed_b64"`
	SignedWith *struct {
		NowMS int64 `json:"now_ms"`
		TTLMS int64 `json:"ttl_ms"`
	} `json:"signed_with"`
	Ad           json.RawMessage `json:"ad"`
	SigningInput string          `json:"signing_input"`
	Sig          string          `json:"sig"`
	PostBody     string          `json:"post_body"`
	CheckNowMS   int64           `json:"check_now_ms"`
	ExpectArg    *struct {
		Host       string `json:"host"`
		HostPubkey string `json:"host_pubkey"`
	} `json:"expect_arg"`
	Checks struct {
		CheckEncAd         *string `json:"checkEncAd"`
		RelayPublishV1     *string `json:"relay_publishEncAd"`
		RelayPublishV2     *string `json:"relay_publishEncAdRecord"`
		EncFromRelayAnswer *struct {
			EncPub *string `json:"enc_pub"`
			Reason *string `json:"reason"`
		} `json:"encFromRelayAnswer"`
	} `json:"checks"`
}

// reasonText is the original's spelling of a verdict: "" for accepted.
func reasonText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func TestEncAdVectors(t *testing.T) {
	cases := loadCases[encAdCase](t, "enc_ad.json")
	var n struct{ v1, v2, signed, checks int }
	enrolledV1 := "" // the v1 relay's enrolment of the key is the first v1 case's host
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			switch c.Version {
			case 1:
				n.v1++
				if enrolledV1 == "" {
					enrolledV1 = c.Host
				}
				var ad EncAdV1
				if err := json.Unmarshal(c.Ad, &ad); err != nil {
					t.Fatal(err)
				}
				if c.HostSeed != "" {
					n.signed++
					got, sig, err := SignEncAdV1(c.Host, mustKey(t, c.HostSeed), ad.EncPub)
					if err != nil {
						t.Fatal(err)
					}
					in, _ := Canonical(got)
					if string(in) != c.SigningInput || sig != c.Sig {
						t.Errorf("v1 ad:\n got %s %s\nwant %s %s", in, sig, c.SigningInput, c.Sig)
					}
					body, err := MarshalJSON(EncAdPublishV1{EncPub: ad.EncPub, Sig: sig})
					if err != nil {
						t.Fatal(err)
					}
					if string(body) != c.PostBody {
						t.Errorf("post body:\n got %s\nwant %s", body, c.PostBody)
					}
				}
				if c.Checks.RelayPublishV1 != nil {
					n.checks++
					err := RelayCheckEncAdV1(EncAdPeer{Host: enrolledV1, HostPubkey: c.HostPubkey}, ad.Host, ad.EncPub, c.Sig)
					if got, want := reasonText(err), *c.Checks.RelayPublishV1; got != want && !(want == "ok" && got == "") {
						t.Errorf("relay publish v1: got %q, want %q", got, want)
					}
				}
				if a := c.Checks.EncFromRelayAnswer; a != nil {
					n.checks++
					encPub, sig := ad.EncPub, c.Sig
					_, _, err := EncFromRelayAnswer(EncKeyAnswer{Host: ad.Host, HostPubkey: c.HostPubkey, EncPub: &encPub, Sig: &sig}, EncAdPeer{Host: c.Host, HostPubkey: c.HostPubkey}, time.Now())
					if got, want := reasonText(err), deref(a.Reason); got != want {
						t.Errorf("encFromRelayAnswer: got %q, want %q", got, want)
					}
				}
			case 2:
				n.v2++
				canon, err := CanonicalJSON(c.Ad)
				if err != nil {
					t.Fatal(err)
				}
				if string(canon) != c.SigningInput {
					t.Errorf("canonical of the ad:\n got %s\nwant %s", canon, c.SigningInput)
				}
				// Where the case's signature is the host key's over this ad, Go signs the same.
				var ad EncAd
				if err := json.Unmarshal(c.Ad, &ad); err != nil {
					t.Fatal(err)
				}
				if Verify(c.HostPubkey, []byte(c.SigningInput), c.Sig) && c.SignedWith != nil {
					got, sig, err := SignEncAdV2(ad.Host, mustKey(t, c.HostSeed), ad.EncPub, ms(c.SignedWith.NowMS), time.Duration(c.SignedWith.TTLMS)*time.Millisecond)
					if in, _ := Canonical(got); err == nil && string(in) == c.SigningInput {
						n.signed++
						if sig != c.Sig {
							t.Errorf("sig: got %s, want %s", sig, c.Sig)
						}
						p, err := got.Publish(sig)
						if err != nil {
							t.Fatal(err)
						}
						wantPostBody(t, p, c.PostBody)
					}
				}
				now := ms(c.CheckNowMS)
				peer := EncAdPeer{Host: c.ExpectArg.Host, HostPubkey: c.ExpectArg.HostPubkey}
				n.checks++
				_, err = CheckEncAd(c.Ad, c.Sig, peer, now)
				if got, want := reasonText(err), deref(c.Checks.CheckEncAd); got != want {
					t.Errorf("checkEncAd: got %q, want %q", got, want)
				}
				if want := c.Checks.RelayPublishV2; want != nil {
					n.checks++
					_, err := CheckEncAd(c.Ad, c.Sig, EncAdPeer{Host: c.Host, HostPubkey: c.HostPubkey}, now)
					got := "ok"
					if err != nil {
						got = "enc-key ad refused: " + err.Error()
					}
					if got != *want {
						t.Errorf("relay publish v2: got %q, want %q", got, *want)
					}
				}
				if a := c.Checks.EncFromRelayAnswer; a != nil {
					n.checks++
					sig := c.Sig
					ans := EncKeyAnswer{Host: c.Host, HostPubkey: c.HostPubkey, Ad: c.Ad, AdSig: &sig}
					if ad.EncPub != "" {
						ans.EncPub = &ad.EncPub
					}
					encPub, _, err := EncFromRelayAnswer(ans, peer, now)
					if got, want := reasonText(err), deref(a.Reason); got != want {
						t.Errorf("encFromRelayAnswer: got %q, want %q", got, want)
					}
					if encPub != deref(a.EncPub) {
						t.Errorf("encFromRelayAnswer enc_pub: got %q, want %q", encPub, deref(a.EncPub))
					}
				}
			default:
				t.Fatalf("unknown version %d", c.Version)
			}
		})
	}
	t.Logf("enc_ad.json: %d v1 and %d v2 cases, %d signed byte for byte, %d verdicts", n.v1, n.v2, n.signed, n.checks)
}

func TestSignEncAdV2DefaultTTL(t *testing.T) {
	k := mustKey(t, "cpSvM9EeBH4U8xp2w40Err6TZANeiBdqn1TQC4aj9Ks=")
	enc := "Xn/zz0guUjNLCukyom0RYlrm8Odf0pC9jj1ZBgdUrEU="
	now := ms(1773480413589)
	ad, sig, err := SignEncAdV2("alpha", k, enc, now, 0)
	if err != nil {
		t.Fatal(err)
	}
	if ad.Exp != "2026-04-13T09:26:53.589Z" {
		t.Errorf("exp: got %s, want 30 days after iat", ad.Exp)
	}
	raw, _ := json.Marshal(ad)
	if _, err := CheckEncAd(raw, sig, EncAdPeer{Host: "alpha", HostPubkey: k.PublicKey()}, now.Add(29*24*time.Hour)); err != nil {
		t.Errorf("own ad refused: %v", err)
	}
	// Host "" in the peer means the host name is not checked.
	if _, err := CheckEncAd(raw, sig, EncAdPeer{HostPubkey: k.PublicKey()}, now); err != nil {
		t.Errorf("own ad without host check refused: %v", err)
	}
	if _, _, err := SignEncAdV2("alpha", k, "not a key", now, 0); !errors.Is(err, ErrEncAdMalformed) {
		t.Errorf("SignEncAdV2 with a bad enc key: got %v", err)
	}
}

func TestEncFromRelayAnswerShapes(t *testing.T) {
	k := mustKey(t, "cpSvM9EeBH4U8xp2w40Err6TZANeiBdqn1TQC4aj9Ks=")
	enc, other := "Xn/zz0guUjNLCukyom0RYlrm8Odf0pC9jj1ZBgdUrEU=", "LJFJfQOEBf1w+we3ljLe6oizxE9o6vgop5XbTa4Wpys="
	now := ms(1773480413589)
	ad, sig, err := SignEncAdV2("alpha", k, enc, now, 0)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(ad)
	peer := EncAdPeer{Host: "alpha", HostPubkey: k.PublicKey()}
	for _, c := range []struct {
		name string
		ans  EncKeyAnswer
		want error
	}{
		{"v2 alone", EncKeyAnswer{Ad: raw, AdSig: &sig}, nil},
		{"v2 with the same served key", EncKeyAnswer{Ad: raw, AdSig: &sig, EncPub: &enc}, nil},
		{"v2 with another served key", EncKeyAnswer{Ad: raw, AdSig: &sig, EncPub: &other}, ErrEncAdTampered},
		{"nothing", EncKeyAnswer{}, ErrEncAdUnsigned},
		{"v1 key without signature", EncKeyAnswer{EncPub: &enc}, ErrEncAdUnsigned},
		{"ad without signature", EncKeyAnswer{Ad: raw}, ErrEncAdUnsigned},
		{"ad null", EncKeyAnswer{Ad: json.RawMessage("null"), AdSig: &sig}, ErrEncAdMalformed},
	} {
		got, _, err := EncFromRelayAnswer(c.ans, peer, now)
		if !errors.Is(err, c.want) || (err == nil && got != enc) {
			t.Errorf("%s: got %q, %v; want %v", c.name, got, err, c.want)
		}
	}
	// An answer decoded from JSON with "ad": null is not "no ad".
	var ans EncKeyAnswer
	if err := json.Unmarshal([]byte(`{"ad":null,"ad_sig":"x"}`), &ans); err != nil {
		t.Fatal(err)
	}
	if _, _, err := EncFromRelayAnswer(ans, peer, now); !errors.Is(err, ErrEncAdMalformed) {
		t.Errorf(`"ad": null: got %v, want %v`, err, ErrEncAdMalformed)
	}
}

func TestNewestEncAd(t *testing.T) {
	ad := func(iat, enc string) EncAd { return EncAd{IAT: iat, EncPub: enc} }
	newer, older := "2026-03-14T09:26:53.589Z", "2026-03-01T00:00:00Z"
	for _, c := range []struct {
		name      string
		stored    *EncAd
		candidate EncAd
		want      EncAd
		err       error
	}{
		{"first", nil, ad(older, "A"), ad(older, "A"), nil},
		{"newer, other key", &EncAd{IAT: older, EncPub: "A"}, ad(newer, "B"), ad(newer, "B"), nil},
		{"older, same key", &EncAd{IAT: newer, EncPub: "A"}, ad(older, "A"), ad(newer, "A"), nil},
		{"older, other key", &EncAd{IAT: newer, EncPub: "A"}, ad(older, "B"), ad(newer, "A"), ErrEncAdRolledBack},
		{"same time, other key", &EncAd{IAT: newer, EncPub: "A"}, ad(newer, "B"), ad(newer, "B"), nil},
	} {
		got, err := NewestEncAd(c.stored, c.candidate)
		if got != c.want || !errors.Is(err, c.err) || (c.err == nil && err != nil) {
			t.Errorf("%s: got %+v, %v; want %+v, %v", c.name, got, err, c.want, c.err)
		}
	}
}

// FuzzCheckEncAd: nothing panics, every refusal is typed, and an accepted ad without fields
// unknown to EncAd re-encodes to its signing input.
func FuzzCheckEncAd(f *testing.F) {
	cases := loadCases[encAdCase](f, "enc_ad.json")
	var peer EncAdPeer
	var now time.Time
	var sig string
	for _, c := range cases {
		if c.Version == 2 && c.Name == "valid (default 30-day ttl)" {
			peer = EncAdPeer{Host: c.Host, HostPubkey: c.HostPubkey}
			now, sig = ms(c.CheckNowMS), c.Sig
		}
		if c.Version == 2 {
			f.Add([]byte(c.Ad))
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		ad, err := CheckEncAd(data, sig, peer, now)
		if err != nil {
			if !errors.Is(err, ErrBadEncAd) {
				t.Fatalf("untyped refusal %v", err)
			}
			return
		}
		m, _ := parseObject(data)
		checkSignedBytes(t, m, 7, ad.SigningInput, "ad")
	})
}

func BenchmarkCheckEncAd(b *testing.B) {
	k := mustKey(b, "cpSvM9EeBH4U8xp2w40Err6TZANeiBdqn1TQC4aj9Ks=")
	now := ms(1773480413589)
	ad, sig, err := SignEncAdV2("alpha", k, "Xn/zz0guUjNLCukyom0RYlrm8Odf0pC9jj1ZBgdUrEU=", now, 0)
	if err != nil {
		b.Fatal(err)
	}
	raw, _ := json.Marshal(ad)
	peer := EncAdPeer{Host: "alpha", HostPubkey: k.PublicKey()}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := CheckEncAd(raw, sig, peer, now); err != nil {
			b.Fatal(err)
		}
	}
}

// wantPostBody fails unless p marshals (as the clients send it) to want.
func wantPostBody(t *testing.T, p any, want string) {
	t.Helper()
	body, err := MarshalJSON(p)
	if err != nil {
		t.Fatal(err)
	}
	if string(body) != want {
		t.Errorf("post body:\n got %s\nwant %s", body, want)
	}
}
