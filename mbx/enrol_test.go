package mbx

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
)

type enrolCase struct {
	Name             string  `json:"name"`
	Expect           string  `json:"expect"`
	Host             string  `json:"host"`
	Pubkey           string  `json:"pubkey"`
	Seed             string  `json:"seed_b64"`
	OwnerFP          string  `json:"owner_fp"`
	Challenge        string  `json:"challenge"`
	SigningInput     string  `json:"signing_input"`
	Sig              string  `json:"sig"`
	ChallengeRequest string  `json:"challenge_request_body"`
	EnrolRequest     string  `json:"enrol_request_body"`
	Pending          *string `json:"relay_pending_challenge"`
	Checks           struct {
		RelayEnrol string `json:"relay_enrol"`
	} `json:"checks"`
}

func TestEnrolVectors(t *testing.T) {
	cases := loadCases[enrolCase](t, "enrol.json")
	var n struct{ signed, checks int }
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			k := mustKey(t, c.Seed)
			if k.PublicKey() != c.Pubkey {
				t.Fatalf("key: got %s, want %s", k.PublicKey(), c.Pubkey)
			}
			in, err := EnrolSigningInput(c.Challenge, c.Host, c.Pubkey, c.OwnerFP)
			if err != nil || string(in) != c.SigningInput {
				t.Errorf("signing input:\n got %s (%v)\nwant %s", in, err, c.SigningInput)
			}
			// The host side, byte for byte: both request bodies and the signature.
			n.signed++
			req, err := SignEnrolment(k, c.Host, c.Challenge, c.OwnerFP)
			if err != nil {
				t.Fatal(err)
			}
			if req.Sig != c.Sig {
				t.Errorf("sig: got %s, want %s", req.Sig, c.Sig)
			}
			body, err := MarshalJSON(ChallengeRequest{Host: c.Host, Pubkey: c.Pubkey})
			if err != nil || string(body) != c.ChallengeRequest {
				t.Errorf("challenge body:\n got %s (%v)\nwant %s", body, err, c.ChallengeRequest)
			}
			if c.Expect == "" {
				body, err := MarshalJSON(req)
				if err != nil || string(body) != c.EnrolRequest {
					t.Errorf("enrol body:\n got %s (%v)\nwant %s", body, err, c.EnrolRequest)
				}
			}
			// The relay side, on the body as sent.
			n.checks++
			var sent EnrolRequest
			if err := json.Unmarshal([]byte(c.EnrolRequest), &sent); err != nil {
				t.Fatal(err)
			}
			pending := ""
			if c.Pending != nil {
				pending = *c.Pending
			}
			got := "ok"
			if err := CheckEnrolment(sent, pending); err != nil {
				got = err.Error()
			}
			if got != c.Checks.RelayEnrol {
				t.Errorf("relay enrol: got %q, want %q", got, c.Checks.RelayEnrol)
			}
		})
	}
	t.Logf("enrol.json: %d cases signed byte for byte, %d relay verdicts", n.signed, n.checks)
}

func TestNewChallenge(t *testing.T) {
	c, err := NewChallenge(bytes.NewReader(bytes.Repeat([]byte{0xfb}, 16)))
	if err != nil {
		t.Fatal(err)
	}
	if c != "-_v7-_v7-_v7-_v7-_v7-w" {
		t.Errorf("challenge: got %q", c)
	}
	if _, err := NewChallenge(bytes.NewReader(make([]byte, 15))); err == nil {
		t.Error("a short random source must fail")
	}
}

func TestCheckChallengeRequest(t *testing.T) {
	key := "rVaWBmcprT7OEYgLEuHVEB40X7fBF/nJx+omHznb4P4="
	for _, c := range []struct {
		host, key string
		want      error
	}{
		{"alpha", key, nil},
		{"Build.Box-01", key, nil},
		{"-bad", key, ErrEnrolHostName},
		{"a" + string(make([]byte, 63)), key, ErrEnrolHostName},
		{"alpha", "rVaWBmcprT7OEYgLEuHVEB40X7fBF_nJx-omHznb4P4=", ErrEnrolHostKey},
		{"alpha", "", ErrEnrolHostKey},
	} {
		if err := CheckChallengeRequest(ChallengeRequest{Host: c.host, Pubkey: c.key}); !errors.Is(err, c.want) || (c.want == nil && err != nil) {
			t.Errorf("%q %q: got %v, want %v", c.host, c.key, err, c.want)
		}
	}
}
