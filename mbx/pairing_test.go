package mbx

import (
	"errors"
	"testing"
)

type pairParty struct {
	Host        string  `json:"host"`
	HostPubkey  string  `json:"host_pubkey"`
	OwnerPubkey *string `json:"owner_pubkey"`
	Nonce       string  `json:"nonce"`
	Addr        string  `json:"addr"`
}

func (p pairParty) party() PairParty {
	return PairParty{Host: p.Host, HostPubkey: p.HostPubkey, OwnerPubkey: deref(p.OwnerPubkey), Nonce: p.Nonce}
}

type pairingCase struct {
	Name        string    `json:"name"`
	Kind        string    `json:"kind"`
	A           pairParty `json:"a"`
	B           pairParty `json:"b"`
	Preimage    string    `json:"preimage"`
	Code        string    `json:"code"`
	CodeSwapped string    `json:"code_swapped"`
	// token pairing
	Token              string   `json:"token"`
	TokenVariants      []string `json:"token_normalized_variants"`
	PairTokenKeyHex    string   `json:"pair_token_key_hex"`
	Transcript         string   `json:"transcript"`
	MACJoin            string   `json:"mac_join"`
	MACAccept          string   `json:"mac_accept"`
	MACJoinFromVariant []string `json:"mac_join_from_variants"`
}

func TestPairingVectors(t *testing.T) {
	cases := loadCases[pairingCase](t, "pairing_code.json")
	var n struct{ codes, tokens int }
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			a, b := c.A.party(), c.B.party()
			if c.Kind == "token_pairing" {
				n.tokens++
				key, err := PairTokenKey(c.Token)
				if err != nil || key != c.PairTokenKeyHex {
					t.Fatalf("token key: got %s (%v), want %s", key, err, c.PairTokenKeyHex)
				}
				want, _ := NormalizePairToken(c.Token)
				for _, v := range c.TokenVariants {
					// Equal normal forms give equal keys (one scrypt run is enough for the test).
					if got, err := NormalizePairToken(v); err != nil || got != want {
						t.Errorf("normalize %q: got %q (%v), want %q", v, got, err, want)
					}
				}
				tr, err := JoinTranscript(a, b, c.B.Addr)
				if err != nil || string(tr) != c.Transcript {
					t.Fatalf("transcript:\n got %s (%v)\nwant %s", tr, err, c.Transcript)
				}
				for label, want := range map[string]string{PairMACJoin: c.MACJoin, PairMACAccept: c.MACAccept} {
					got, err := PairMAC(key, label, tr)
					if err != nil || !PairMACEqual(got, want) {
						t.Errorf("mac %s: got %s (%v), want %s", label, got, err, want)
					}
				}
				for _, m := range c.MACJoinFromVariant {
					if m != c.MACJoin {
						t.Errorf("variant MAC %s differs from %s", m, c.MACJoin)
					}
				}
				return
			}
			n.codes++
			if got := PairingPreimage(a, b); got != c.Preimage {
				t.Errorf("preimage:\n got %q\nwant %q", got, c.Preimage)
			}
			if got := PairingCode(a, b); got != c.Code {
				t.Errorf("code: got %s, want %s", got, c.Code)
			}
			if got := PairingCode(b, a); got != c.CodeSwapped {
				t.Errorf("swapped code: got %s, want %s", got, c.CodeSwapped)
			}
		})
	}
	t.Logf("pairing_code.json: %d codes and %d token pairing (key, transcript, both MACs) byte for byte", n.codes, n.tokens)
}

func TestNormalizePairToken(t *testing.T) {
	for _, c := range []struct {
		in, want string
		err      error
	}{
		{"7k3m-9qxr-2bfd", "7K3M9QXR2BFD", nil},
		{" 7K3M\u00a09QXR 2BFD ", "7K3M9QXR2BFD", nil},
		{"ilo0-0000-0000", "1100" + "00000000", nil},
		{"7K3M-9QXR-2BF", "", ErrPairToken},
		{"7K3M-9QXR-2BFU", "", ErrPairToken}, // U is not Crockford base32
		{"", "", ErrPairToken},
	} {
		got, err := NormalizePairToken(c.in)
		if got != c.want || !errors.Is(err, c.err) || (c.err == nil && err != nil) {
			t.Errorf("%q: got %q, %v; want %q, %v", c.in, got, err, c.want, c.err)
		}
	}
	if _, err := PairMAC("00", PairMACJoin, nil); !errors.Is(err, ErrPairTokenKey) {
		t.Errorf("short key: got %v", err)
	}
	if _, err := PairMAC("4dbd86f3232537b6f4d4702bcfbd2d8e2252aa25090c2e8bc68f4d86f1e0b745", "other", nil); !errors.Is(err, ErrPairMACLabel) {
		t.Errorf("bad label: got %v", err)
	}
}
