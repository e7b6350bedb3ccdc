package mbx

import (
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"
)

type sendersCase struct {
	Name         string          `json:"name"`
	Expect       string          `json:"expect"`
	TargetPubkey string          `json:"target_pubkey"`
	TargetSeed   string          `json:"target_seed_b64"`
	List         json.RawMessage `json:"list"`
	SigningInput string          `json:"signing_input"`
	Sig          string          `json:"sig"`
	PostBody     string          `json:"post_body"`
	RelayNowMS   int64           `json:"relay_now_ms"`
	Checks       struct {
		RelayPublishSenders string `json:"relay_publishSenders"`
	} `json:"checks"`
}

func TestSendersVectors(t *testing.T) {
	cases := loadCases[sendersCase](t, "senders.json")
	var stored time.Time // the relay's stored list; the cases run in order on one relay
	var n struct{ signed, checks int }
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			if in, err := CanonicalJSON(c.List); err != nil || string(in) != c.SigningInput {
				t.Errorf("signing input:\n got %s (%v)\nwant %s", in, err, c.SigningInput)
			}
			var list SenderList
			if err := json.Unmarshal(c.List, &list); err != nil {
				t.Fatal(err)
			}
			k := mustKey(t, c.TargetSeed)
			if list.HostPubkey == k.PublicKey() && Verify(k.PublicKey(), []byte(c.SigningInput), c.Sig) {
				iat, err := ParseISOTime(list.IAT)
				if err != nil {
					t.Fatal(err)
				}
				// Duplicates and order of the input do not matter.
				in := append(slices.Clone(list.Senders), list.Senders...)
				slices.Reverse(in)
				got, sig, err := SignSenderList(k, in, iat)
				if err == nil {
					n.signed++
					if b, _ := got.SigningInput(); string(b) != c.SigningInput || sig != c.Sig {
						t.Errorf("signed list:\n got %s %s\nwant %s %s", b, sig, c.SigningInput, c.Sig)
					}
					p, err := got.Publish(sig)
					if err != nil {
						t.Fatal(err)
					}
					wantPostBody(t, p, c.PostBody)
				} else if c.Expect == "" {
					t.Errorf("SignSenderList: %v", err)
				}
			}
			n.checks++
			l, err := CheckSenderList(c.List, c.Sig, c.TargetPubkey, ms(c.RelayNowMS), stored)
			got := "ok"
			if err != nil {
				got = err.Error()
			}
			if got != c.Checks.RelayPublishSenders {
				t.Errorf("relay publishSenders: got %q, want %q", got, c.Checks.RelayPublishSenders)
			}
			if err == nil {
				stored = l.IATTime()
			}
		})
	}
	t.Logf("senders.json: %d cases, %d signed byte for byte, %d verdicts", len(cases), n.signed, n.checks)
}

func TestSenderListLimits(t *testing.T) {
	k := mustKey(t, "IgyUArN1Flej0R95595Za6EnYN/NnHEX1y7ev+cGedg=")
	now := ms(1773480413589)
	many := make([]string, MaxSenders+1)
	for i := range many {
		var raw [32]byte
		raw[0], raw[1] = byte(i>>8), byte(i)
		many[i] = B64(raw[:])
	}
	if _, _, err := SignSenderList(k, many, now); !errors.Is(err, ErrSendersMalformed) {
		t.Errorf("%d senders: got %v, want %v", len(many), err, ErrSendersMalformed)
	}
	l, sig, err := SignSenderList(k, many[:MaxSenders], now)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(l)
	if _, err := CheckSenderList(raw, sig, k.PublicKey(), now, time.Time{}); err != nil {
		t.Errorf("%d senders: got %v, want accepted", MaxSenders, err)
	}
	// A newer stored list wins; an older one is replaced.
	if _, err := CheckSenderList(raw, sig, k.PublicKey(), now, now.Add(time.Millisecond)); !errors.Is(err, ErrSendersStale) {
		t.Errorf("stored newer: got %v, want %v", err, ErrSendersStale)
	}
	if _, err := CheckSenderList(raw, sig, k.PublicKey(), now, now.Add(-time.Millisecond)); err != nil {
		t.Errorf("stored older: got %v, want accepted", err)
	}
	// Exactly five minutes ahead is still accepted; one millisecond more is not.
	if _, err := CheckSenderList(raw, sig, k.PublicKey(), now.Add(-5*time.Minute), time.Time{}); err != nil {
		t.Errorf("iat 5 min ahead: got %v, want accepted", err)
	}
	if _, err := CheckSenderList(raw, sig, k.PublicKey(), now.Add(-5*time.Minute-time.Millisecond), time.Time{}); !errors.Is(err, ErrSendersFuture) {
		t.Errorf("iat 5 min 1 ms ahead: got %v, want %v", err, ErrSendersFuture)
	}
	if got := (SenderList{Senders: []string{"b", "a", "b"}}).UniqueSenders(); !slices.Equal(got, []string{"b", "a"}) {
		t.Errorf("UniqueSenders: got %v", got)
	}
}

// FuzzCheckSenderList: nothing panics, refusals are typed, and an accepted list without unknown
// fields re-encodes to its signing input.
func FuzzCheckSenderList(f *testing.F) {
	cases := loadCases[sendersCase](f, "senders.json")
	target, sig, now := cases[0].TargetPubkey, cases[0].Sig, ms(cases[0].RelayNowMS)
	for _, c := range cases {
		f.Add([]byte(c.List))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		l, err := CheckSenderList(data, sig, target, now, time.Time{})
		if err != nil {
			if !errors.Is(err, ErrBadSenderList) {
				t.Fatalf("untyped refusal %v", err)
			}
			return
		}
		m, _ := parseObject(data)
		checkSignedBytes(t, m, 5, l.SigningInput, "list")
	})
}
