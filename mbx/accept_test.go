package mbx

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"testing"
)

type acceptCase struct {
	Name         string `json:"name"`
	Expect       string `json:"expect"`
	Op           string `json:"op"`
	RelaySeed    string `json:"relay_seed_b64"`
	RelayPubkey  string `json:"relay_pubkey"`
	Epoch        string `json:"epoch"`
	SenderPubkey string `json:"sender_pubkey"`
	RelayNowMS   int64  `json:"relay_now_ms"`
	PushBody     string `json:"push_body"`
	Items        []struct {
		Kind    string `json:"kind"`
		ItemID  string `json:"item_id"`
		Targets []struct {
			HostPubkey string `json:"host_pubkey"`
			Wire       string `json:"wire"`
			WireSHA256 string `json:"wire_sha256"`
		} `json:"targets"`
	} `json:"items"`
	Results []struct {
		Result       json.RawMessage   `json:"result"`
		SigningInput string            `json:"signing_input"`
		ValidAccept  map[string]string `json:"validAccept"`
	} `json:"results"`
	// op validAccept
	ItemID           string          `json:"item_id"`
	TargetPubkey     string          `json:"target_pubkey"`
	WireSHA256       string          `json:"wire_sha256"`
	Result           json.RawMessage `json:"result"`
	SigningInput     string          `json:"signing_input"`
	ValidAcceptValue json.RawMessage `json:"validAccept"`
}

// acceptRefusals names the reason Go gives for each forged statement of the vectors (the original
// only says "not valid").
var acceptRefusals = map[string]error{
	"signature by another key":                        ErrAcceptSignature,
	"signed by a relay key other than the pinned one": ErrAcceptRelayKey,
	"wire hash differs":                               ErrAcceptWireHash,
	"accept for another item":                         ErrAcceptItem,
	"accept names another target":                     ErrAcceptTarget,
	"seq changed after signing":                       ErrAcceptSignature,
	"at changed after signing":                        ErrAcceptSignature,
	"status rejected":                                 ErrAcceptStatus,
	"seq not a safe integer":                          ErrAcceptSeq,
}

func TestRelayAcceptVectors(t *testing.T) {
	cases := loadCases[acceptCase](t, "relay_accept.json")
	var n struct{ pushes, statements, rejections, wires, checks int }
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			if c.Op == "validAccept" {
				n.checks++
				var want string
				if err := json.Unmarshal(c.ValidAcceptValue, &want); err != nil {
					t.Fatal(err)
				}
				var r PushResult
				if err := json.Unmarshal(c.Result, &r); err != nil {
					t.Fatal(err)
				}
				if in, err := CanonicalJSON(r.Accept); err != nil || string(in) != c.SigningInput {
					t.Errorf("signing input:\n got %s (%v)\nwant %s", in, err, c.SigningInput)
				}
				_, _, err := ValidAccept(r, c.RelayPubkey, c.SenderPubkey, c.ItemID, c.TargetPubkey, c.WireSHA256)
				switch want {
				case "valid":
					if err != nil {
						t.Errorf("validAccept: got %v, want valid", err)
					}
				case "refused":
					if wantErr, ok := acceptRefusals[c.Name]; !ok || !errors.Is(err, wantErr) {
						t.Errorf("validAccept: got %v, want %v", err, wantErr)
					}
				default:
					t.Fatalf("unknown verdict %q", want)
				}
				return
			}
			n.pushes++
			relay := mustKey(t, c.RelaySeed)
			if relay.PublicKey() != c.RelayPubkey {
				t.Fatalf("relay key: got %s, want %s", relay.PublicKey(), c.RelayPubkey)
			}
			// The client's push body, byte for byte.
			var req PushRequest
			for _, it := range c.Items {
				pi := PushItem{Kind: it.Kind, ItemID: it.ItemID}
				for _, tg := range it.Targets {
					n.wires++
					if got := WireHash([]byte(tg.Wire)); got != tg.WireSHA256 {
						t.Errorf("wire hash: got %s, want %s", got, tg.WireSHA256)
					}
					pi.Targets = append(pi.Targets, PushTarget{HostPubkey: tg.HostPubkey, WireB64: base64.StdEncoding.EncodeToString([]byte(tg.Wire))})
					if it.Kind == ItemKindReceipt {
						if _, err := CheckReceiptWire(it.ItemID, []byte(tg.Wire), c.SenderPubkey); err != nil {
							t.Errorf("relay check of the receipt item: %v", err)
						}
					}
				}
				req.Items = append(req.Items, pi)
			}
			body, err := MarshalJSON(req)
			if err != nil {
				t.Fatal(err)
			}
			if string(body) != c.PushBody {
				t.Errorf("push body:\n got %.200s\nwant %.200s", body, c.PushBody)
			}
			for i, res := range c.Results {
				var r PushResult
				if err := json.Unmarshal(res.Result, &r); err != nil {
					t.Fatal(err)
				}
				want, err := CanonicalJSON(res.Result)
				if err != nil {
					t.Fatal(err)
				}
				// The relay's answer, made by Go from the same facts.
				var mine PushResult
				if code, rejected := r.Rejected(); rejected {
					n.rejections++
					mine = RejectedResult(r.ItemID, code)
				} else {
					n.statements++
					var a Accept
					if err := json.Unmarshal(r.Accept, &a); err != nil {
						t.Fatal(err)
					}
					at, err := ParseISOTime(a.At)
					if err != nil {
						t.Fatal(err)
					}
					a2 := NewAccept(relay.PublicKey(), c.Epoch, c.SenderPubkey, r.ItemID, a.Targets, at)
					if in, _ := a2.SigningInput(); string(in) != res.SigningInput {
						t.Errorf("signing input:\n got %s\nwant %s", in, res.SigningInput)
					}
					if mine, err = AcceptedResult(relay, r.Status, a2); err != nil {
						t.Fatal(err)
					}
					for j, tg := range a2.Targets {
						if tg.WireHash != c.Items[i].Targets[j].WireSHA256 {
							t.Errorf("target %d wire_hash: got %s, want %s", j, tg.WireHash, c.Items[i].Targets[j].WireSHA256)
						}
					}
				}
				got, err := Canonical(mine)
				if err != nil {
					t.Fatal(err)
				}
				if string(got) != string(want) {
					t.Errorf("result:\n got %s\nwant %s", got, want)
				}
				// The sender's verdict for each target.
				for target, verdict := range res.ValidAccept {
					n.checks++
					hash := ""
					for _, tg := range c.Items[i].Targets {
						if tg.HostPubkey == target {
							hash = tg.WireSHA256
						}
					}
					_, seq, err := ValidAccept(r, c.RelayPubkey, c.SenderPubkey, c.Items[i].ItemID, target, hash)
					switch verdict {
					case "valid":
						if err != nil {
							t.Errorf("validAccept %s: got %v, want valid", target, err)
						}
						if seq <= 0 {
							t.Errorf("validAccept %s: seq %d", target, seq)
						}
					case "refused":
						if !errors.Is(err, ErrAcceptStatus) {
							t.Errorf("validAccept %s: got %v, want %v", target, err, ErrAcceptStatus)
						}
					default:
						t.Fatalf("unknown verdict %q", verdict)
					}
				}
			}
		})
	}
	t.Logf("relay_accept.json: %d cases: %d pushes (%d wires, %d statements and %d rejections made byte for byte), %d validAccept verdicts",
		len(cases), n.pushes, n.wires, n.statements, n.rejections, n.checks)
}

func TestValidAcceptShapes(t *testing.T) {
	relay := mustKey(t, "gJF5o9gf/v4qi64gPljpuYZs+9rY3eR++q/A1IpZ7ao=")
	sender, target := "rVaWBmcprT7OEYgLEuHVEB40X7fBF/nJx+omHznb4P4=", "FUXk5FNVq/ofFbA/ybKIH9N0/ClqW29kM2uu0KlMX28="
	hash := WireHash([]byte("wire"))
	good := NewAccept(relay.PublicKey(), "e", sender, "id", []AcceptTarget{{HostPubkey: target, Seq: 1773480414589, WireHash: hash}}, ms(1773480414589))
	r, err := AcceptedResult(relay, StatusDuplicate, good)
	if err != nil {
		t.Fatal(err)
	}
	if a, seq, err := ValidAccept(r, relay.PublicKey(), sender, "id", target, hash); err != nil || seq != 1773480414589 || a.Epoch != "e" {
		t.Errorf("duplicate: got %+v %d %v", a, seq, err)
	}
	for _, c := range []struct {
		name   string
		mutate func(*PushResult)
		want   error
	}{
		{"no accept", func(r *PushResult) { r.Accept = nil }, ErrAcceptStatus},
		{"no sig", func(r *PushResult) { r.Sig = "" }, ErrAcceptStatus},
		{"accept not an object", func(r *PushResult) { r.Accept = json.RawMessage(`[1]`) }, ErrAcceptMalformed},
		{"targets not an array", func(r *PushResult) {
			r.Accept = json.RawMessage(`{"type":"relay-accept","relay_pubkey":"` + relay.PublicKey() + `","sender_pubkey":"` + sender + `","item_id":"id","targets":{}}`)
		}, ErrAcceptMalformed},
		{"pinned key empty", func(r *PushResult) {}, ErrAcceptRelayKey},
	} {
		rr := r
		c.mutate(&rr)
		pinned := relay.PublicKey()
		if c.name == "pinned key empty" {
			pinned = ""
		}
		if _, _, err := ValidAccept(rr, pinned, sender, "id", target, hash); !errors.Is(err, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, err, c.want)
		}
	}
	if code, ok := RejectedResult("x", "quota:queue").Rejected(); !ok || code != "quota:queue" {
		t.Errorf("Rejected: got %q %v", code, ok)
	}
}

// FuzzValidAccept: nothing panics on any statement, refusals are typed, and an accepted statement
// without unknown fields re-encodes to its signing input.
func FuzzValidAccept(f *testing.F) {
	cases := loadCases[acceptCase](f, "relay_accept.json")
	var relay, sender, item, target, hash string
	for _, c := range cases {
		if c.Op == "validAccept" {
			f.Add([]byte(c.Result))
			relay, sender, item, target, hash = c.RelayPubkey, c.SenderPubkey, c.ItemID, c.TargetPubkey, c.WireSHA256
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var r PushResult
		if json.Unmarshal(data, &r) != nil {
			return
		}
		a, _, err := ValidAccept(r, relay, sender, item, target, hash)
		if err != nil {
			if !errors.Is(err, ErrBadAccept) {
				t.Fatalf("untyped refusal %v", err)
			}
			return
		}
		m, _ := parseObject(r.Accept)
		want, _ := Canonical(m)
		got, err := a.SigningInput()
		if err != nil {
			t.Fatal(err)
		}
		if len(m) == 8 && string(got) != string(want) {
			t.Fatalf("re-encoded statement differs:\n got %s\nwant %s", got, want)
		}
	})
}

func BenchmarkValidAccept(b *testing.B) {
	relay := mustKey(b, "gJF5o9gf/v4qi64gPljpuYZs+9rY3eR++q/A1IpZ7ao=")
	sender, target := "rVaWBmcprT7OEYgLEuHVEB40X7fBF/nJx+omHznb4P4=", "FUXk5FNVq/ofFbA/ybKIH9N0/ClqW29kM2uu0KlMX28="
	hash := WireHash([]byte("wire"))
	a := NewAccept(relay.PublicKey(), "6f0c2a4e-9b1d-4c3e-8a5f-1d2e3f405162", sender, "01KKNTQ2CN9WJ3MR4Q1P12F02T", []AcceptTarget{{HostPubkey: target, Seq: 1773480414589, WireHash: hash}}, ms(1773480414589))
	r, err := AcceptedResult(relay, StatusAccepted, a)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := ValidAccept(r, relay.PublicKey(), sender, a.ItemID, target, hash); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAcceptedResult(b *testing.B) {
	relay := mustKey(b, "gJF5o9gf/v4qi64gPljpuYZs+9rY3eR++q/A1IpZ7ao=")
	a := NewAccept(relay.PublicKey(), "6f0c2a4e-9b1d-4c3e-8a5f-1d2e3f405162", "rVaWBmcprT7OEYgLEuHVEB40X7fBF/nJx+omHznb4P4=", "01KKNTQ2CN9WJ3MR4Q1P12F02T",
		[]AcceptTarget{{HostPubkey: "FUXk5FNVq/ofFbA/ybKIH9N0/ClqW29kM2uu0KlMX28=", Seq: 1773480414589, WireHash: WireHash([]byte("wire"))}}, ms(1773480414589))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := AcceptedResult(relay, StatusAccepted, a); err != nil {
			b.Fatal(err)
		}
	}
}
