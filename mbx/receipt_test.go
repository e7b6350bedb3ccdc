package mbx

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"
)

type receiptCase struct {
	Name          string             `json:"name"`
	Expect        string             `json:"expect"`
	LoneSurrogate bool               `json:"lone_surrogate"`
	SignerHost    string             `json:"signer_host"`
	SignerSeed    string             `json:"signer_seed_b64"`
	SignerPubkey  string             `json:"signer_pubkey"`
	Row           *receiptRow        `json:"row"`
	DidRecorded   json.RawMessage    `json:"did_recorded"`
	Rec           json.RawMessage    `json:"rec"`
	SigningInput  string             `json:"signing_input"`
	Sig           string             `json:"sig"`
	Wire          string             `json:"wire"`
	WireSHA256    string             `json:"wire_sha256"`
	ItemID        string             `json:"item_id"`
	LANHopHost    string             `json:"lan_hop_host"`
	Checks        map[string]*string `json:"checks"`
}

type receiptRow struct {
	Seq   int64           `json:"seq"`
	MsgID string          `json:"msg_id"`
	Agent string          `json:"agent"`
	Host  string          `json:"host"`
	State string          `json:"state"`
	Note  json.RawMessage `json:"note"`
	At    string          `json:"at"`
}

// fakeBook is a sending host that paired peers with keys and sent messages to hosts.
type fakeBook struct {
	peers  map[string][]string        // host -> current and retired keys
	sent   map[string]map[string]bool // msg -> hosts it was routed to
	stored map[string]StoredReceipt   // msg + "\x00" + recipient
	counts map[string]int             // msg + "\x00" + host
}

func (b *fakeBook) PeerKeys(host string) ([]string, bool) { k, ok := b.peers[host]; return k, ok }
func (b *fakeBook) SentTo(msg, host string) (bool, bool) {
	hosts, ok := b.sent[msg]
	return ok, hosts[host]
}
func (b *fakeBook) StoredReceipt(msg, recipient string) *StoredReceipt {
	if s, ok := b.stored[msg+"\x00"+recipient]; ok {
		return &s
	}
	return nil
}
func (b *fakeBook) ReceiptCount(msg, host string) int { return b.counts[msg+"\x00"+host] }

// sampleMsg is a message id for the tests beyond the vectors.
const sampleMsg = "01JQ3A7Z8K2M4N6P8R0T2V4X6Z"

// vectorBook is the node of the file's acceptReceipt checks: it pins the signer's key and sent
// msg, the message the file's signed receipts are about, to the signer's host.
func vectorBook(signerHost, signerPub, msg string) *fakeBook {
	return &fakeBook{
		peers: map[string][]string{signerHost: {signerPub}},
		sent:  map[string]map[string]bool{msg: {signerHost: true}},
	}
}

// sentMessage is the message the file's signed receipts are about: the msg of the first case
// that has a signed record. The file's other cases are about it too, or claim another message
// precisely to be refused as one the node did not send.
func sentMessage(t *testing.T, cases []receiptCase) string {
	t.Helper()
	for _, c := range cases {
		var rec struct {
			Msg string `json:"msg"`
		}
		if len(c.Rec) > 0 && json.Unmarshal(c.Rec, &rec) == nil && rec.Msg != "" {
			return rec.Msg
		}
	}
	t.Fatal("receipt.json has no signed record to take the sent message from")
	return ""
}

var receiptReasons = map[string]error{
	"rejected:bad signature":                    ErrReceiptSignature,
	"rejected:invalid receipt":                  ErrReceiptInvalid,
	"rejected:not a message this host sent":     ErrReceiptNotSent,
	"rejected:receipt for *":                    ErrReceiptWrongHop,
	"receipt is not signed by the sending host": ErrReceiptNotSender,
	"bad receipt":                               ErrReceiptInvalid,
	"item id is not the receipt id":             ErrReceiptItemID,
}

func TestReceiptVectors(t *testing.T) {
	cases := loadCases[receiptCase](t, "receipt.json")
	// The negative wire cases are signed by (or claim) the first case's signer.
	first := cases[0]
	msg := sentMessage(t, cases)
	var n struct{ signed, lone, sign_errors, wires, checks int }
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			signerHost, signerPub := c.SignerHost, c.SignerPubkey
			if signerHost == "" {
				signerHost, signerPub = first.SignerHost, first.SignerPubkey
			}
			switch {
			case c.Expect == "error":
				n.sign_errors++
				k := mustKey(t, first.SignerSeed)
				_, err := SignReceipt(k, first.SignerHost, rowInput(t, c.Row, nil))
				if !errors.Is(err, ErrReceiptInvalid) {
					t.Errorf("SignReceipt: got %v, want %v", err, ErrReceiptInvalid)
				}
				return
			case c.LoneSurrogate:
				// Go strings cannot hold the lone surrogate the original signed (README item 5):
				// check the original's signature over its bytes, and that Go refuses the wire
				// rather than accepting something else.
				n.lone++
				if !Verify(signerPub, []byte(c.SigningInput), c.Sig) {
					t.Error("the original's signature does not verify over its signing input")
				}
				if _, _, err := AcceptReceipt(vectorBook(signerHost, signerPub, msg), []byte(c.Wire), ""); !errors.Is(err, ErrReceiptSignature) {
					t.Errorf("AcceptReceipt of a lone-surrogate wire: got %v, want %v", err, ErrReceiptSignature)
				}
				return
			case c.Expect == "":
				n.signed++
				k := mustKey(t, c.SignerSeed)
				if k.PublicKey() != c.SignerPubkey {
					t.Fatalf("signer key: got %s, want %s", k.PublicKey(), c.SignerPubkey)
				}
				did, _ := nullableString(c.DidRecorded)
				s, err := SignReceipt(k, c.SignerHost, rowInput(t, c.Row, &did))
				if err != nil {
					t.Fatalf("SignReceipt: %v", err)
				}
				gotRec, err := Canonical(s.Rec)
				if err != nil {
					t.Fatal(err)
				}
				wantRec, err := CanonicalJSON(c.Rec)
				if err != nil {
					t.Fatal(err)
				}
				if string(gotRec) != string(wantRec) || string(gotRec) != c.SigningInput {
					t.Errorf("record:\n got %s\nwant %s", gotRec, c.SigningInput)
				}
				if s.Sig != c.Sig {
					t.Errorf("sig: got %s, want %s", s.Sig, c.Sig)
				}
				wire, err := s.Wire()
				if err != nil {
					t.Fatal(err)
				}
				if string(wire) != c.Wire || WireHash(wire) != c.WireSHA256 {
					t.Errorf("wire:\n got %s\nwant %s", wire, c.Wire)
				}
				if s.ItemID() != c.ItemID {
					t.Errorf("item id: got %s, want %s", s.ItemID(), c.ItemID)
				}
				// What the original produced parses back to the same bytes.
				p, err := ParseReceipt([]byte(c.Wire))
				if err != nil {
					t.Fatalf("ParseReceipt: %v", err)
				}
				if w, _ := p.Wire(); string(w) != c.Wire {
					t.Errorf("re-encoded wire:\n got %s\nwant %s", w, c.Wire)
				}
			default:
				n.wires++
			}
			for name, verdict := range c.Checks {
				n.checks++
				v := ""
				if verdict != nil {
					v = *verdict
				}
				var err error
				switch name {
				case "acceptReceipt_lan_from_signer":
					var verdict ReceiptVerdict
					_, verdict, err = AcceptReceipt(vectorBook(signerHost, signerPub, msg), []byte(c.Wire), signerHost)
					if err == nil && verdict != ReceiptAccepted {
						err = fmt.Errorf("verdict %v", verdict)
					}
				case "acceptReceipt_via_relay":
					var verdict ReceiptVerdict
					_, verdict, err = AcceptReceipt(vectorBook(signerHost, signerPub, msg), []byte(c.Wire), "")
					if err == nil && verdict != ReceiptAccepted {
						err = fmt.Errorf("verdict %v", verdict)
					}
				case "acceptReceipt":
					_, _, err = AcceptReceipt(vectorBook(signerHost, signerPub, msg), []byte(c.Wire), c.LANHopHost)
				case "relay_checkWire":
					_, err = CheckReceiptWire(c.ItemID, []byte(c.Wire), signerPub)
				default:
					t.Fatalf("unknown check %q", name)
				}
				wantReason(t, name, err, v, receiptReasons)
			}
		})
	}
	t.Logf("receipt.json: %d signed byte for byte, %d lone-surrogate documented, %d schema errors, %d tampered wires, %d verdicts",
		n.signed, n.lone, n.sign_errors, n.wires, n.checks)
}

func rowInput(t *testing.T, r *receiptRow, did *string) ReceiptInput {
	t.Helper()
	if r == nil {
		t.Fatal("case has no row")
	}
	st, err := ParseReceiptState(r.State)
	if err != nil {
		st = 0 // an unknown state must be refused by SignReceipt
	}
	in := ReceiptInput{Msg: r.MsgID, Agent: r.Agent, State: st, At: r.At, Seq: r.Seq}
	in.Note, _ = nullableString(r.Note)
	if did != nil {
		in.Did = *did
	}
	return in
}

func TestDecideReceipt(t *testing.T) {
	rec := func(st ReceiptState, seq int64) ReceiptRecord { return ReceiptRecord{State: st, Seq: seq} }
	for _, c := range []struct {
		name   string
		stored *StoredReceipt
		rec    ReceiptRecord
		want   ReceiptVerdict
	}{
		{"first", nil, rec(ReceiptDelivered, 1), ReceiptAccepted},
		{"same state and seq", &StoredReceipt{ReceiptRead, 3}, rec(ReceiptRead, 3), ReceiptDuplicate},
		{"higher state, lower seq", &StoredReceipt{ReceiptRead, 9}, rec(ReceiptAcked, 2), ReceiptAccepted},
		{"lower state, higher seq", &StoredReceipt{ReceiptRead, 3}, rec(ReceiptNotified, 7), ReceiptStale},
		{"same state, lower seq", &StoredReceipt{ReceiptRead, 3}, rec(ReceiptRead, 2), ReceiptStale},
		{"same state, higher seq", &StoredReceipt{ReceiptRead, 3}, rec(ReceiptRead, 4), ReceiptAccepted},
	} {
		if got := DecideReceipt(c.stored, c.rec); got != c.want {
			t.Errorf("%s: got %v, want %v", c.name, got, c.want)
		}
	}
}

func TestAcceptReceiptHostState(t *testing.T) {
	old := mustKey(t, "IgyUArN1Flej0R95595Za6EnYN/NnHEX1y7ev+cGedg=")
	cur := mustKey(t, "cpSvM9EeBH4U8xp2w40Err6TZANeiBdqn1TQC4aj9Ks=")
	in := ReceiptInput{Msg: sampleMsg, Agent: "bob", State: ReceiptRead, At: "2026-03-14T09:26:53.589Z", Seq: 5}
	signedBy := func(k SigningKey) []byte {
		s, err := SignReceipt(k, "beta", in)
		if err != nil {
			t.Fatal(err)
		}
		w, err := s.Wire()
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	book := func() *fakeBook {
		return &fakeBook{
			peers:  map[string][]string{"beta": {cur.PublicKey(), old.PublicKey()}},
			sent:   map[string]map[string]bool{sampleMsg: {"beta": true}},
			stored: map[string]StoredReceipt{},
			counts: map[string]int{},
		}
	}
	t.Run("retired key still verifies", func(t *testing.T) {
		if _, v, err := AcceptReceipt(book(), signedBy(old), ""); err != nil || v != ReceiptAccepted {
			t.Errorf("got %v, %v; want accepted", v, err)
		}
	})
	t.Run("not paired", func(t *testing.T) {
		b := book()
		delete(b.peers, "beta")
		if _, _, err := AcceptReceipt(b, signedBy(cur), ""); !errors.Is(err, ErrReceiptNotPaired) {
			t.Errorf("got %v, want %v", err, ErrReceiptNotPaired)
		}
	})
	t.Run("sent but not to that host", func(t *testing.T) {
		b := book()
		b.sent[sampleMsg] = map[string]bool{"gamma": true}
		if _, _, err := AcceptReceipt(b, signedBy(cur), ""); !errors.Is(err, ErrReceiptNotRouted) {
			t.Errorf("got %v, want %v", err, ErrReceiptNotRouted)
		}
	})
	t.Run("duplicate and stale", func(t *testing.T) {
		b := book()
		b.stored[sampleMsg+"\x00bob@beta"] = StoredReceipt{ReceiptRead, 5}
		if _, v, err := AcceptReceipt(b, signedBy(cur), "beta"); err != nil || v != ReceiptDuplicate {
			t.Errorf("got %v, %v; want duplicate", v, err)
		}
		b.stored[sampleMsg+"\x00bob@beta"] = StoredReceipt{ReceiptAcked, 1}
		if _, v, err := AcceptReceipt(b, signedBy(cur), "beta"); err != nil || v != ReceiptStale {
			t.Errorf("got %v, %v; want stale", v, err)
		}
	})
	t.Run("too many recipients", func(t *testing.T) {
		b := book()
		b.counts[sampleMsg+"\x00beta"] = MaxReceiptRecipientsPerHost
		if _, _, err := AcceptReceipt(b, signedBy(cur), ""); !errors.Is(err, ErrReceiptTooMany) {
			t.Errorf("got %v, want %v", err, ErrReceiptTooMany)
		}
		// A recipient already stored is an update, not a new row.
		b.stored[sampleMsg+"\x00bob@beta"] = StoredReceipt{ReceiptDelivered, 1}
		if _, v, err := AcceptReceipt(b, signedBy(cur), ""); err != nil || v != ReceiptAccepted {
			t.Errorf("got %v, %v; want accepted", v, err)
		}
	})
}

func TestParseReceiptStrict(t *testing.T) {
	good := `{"at":"2026-03-14T09:26:53.589Z","msg":"01JQ3A7Z8K2M4N6P8R0T2V4X6Z","recipient":"bob@beta","seq":1,"state":"delivered","type":"receipt","v":1}`
	for _, c := range []struct {
		name string
		rec  string
		sig  string
		ok   bool
	}{
		{"good", good, `"x"`, true},
		{"seq written 1.0", `{"at":"2026-03-14T09:26:53.589Z","msg":"01JQ3A7Z8K2M4N6P8R0T2V4X6Z","recipient":"bob@beta","seq":1.0,"state":"delivered","type":"receipt","v":1}`, `"x"`, true},
		{"at without seconds", `{"at":"2026-03-14T09:26Z","msg":"01JQ3A7Z8K2M4N6P8R0T2V4X6Z","recipient":"bob@beta","seq":1,"state":"delivered","type":"receipt","v":1}`, `"x"`, true},
		{"at on 30 February", `{"at":"2026-02-30T09:26:53Z","msg":"01JQ3A7Z8K2M4N6P8R0T2V4X6Z","recipient":"bob@beta","seq":1,"state":"delivered","type":"receipt","v":1}`, `"x"`, false},
		{"recipient with two @", `{"at":"2026-03-14T09:26:53.589Z","msg":"01JQ3A7Z8K2M4N6P8R0T2V4X6Z","recipient":"bob@beta@x","seq":1,"state":"delivered","type":"receipt","v":1}`, `"x"`, false},
		{"seq 1.5", `{"at":"2026-03-14T09:26:53.589Z","msg":"01JQ3A7Z8K2M4N6P8R0T2V4X6Z","recipient":"bob@beta","seq":1.5,"state":"delivered","type":"receipt","v":1}`, `"x"`, false},
		{"note null", `{"at":"2026-03-14T09:26:53.589Z","msg":"01JQ3A7Z8K2M4N6P8R0T2V4X6Z","note":null,"recipient":"bob@beta","seq":1,"state":"delivered","type":"receipt","v":1}`, `"x"`, false},
		{"sig not a string", good, `1`, false},
		{"sig too long", good, fmt.Sprintf("%q", string(make([]byte, 201))), false},
	} {
		_, err := ParseReceipt([]byte(`{"rec":` + c.rec + `,"sig":` + c.sig + `}`))
		if (err == nil) != c.ok {
			t.Errorf("%s: got %v, want ok=%v", c.name, err, c.ok)
		}
	}
}

func TestReceiptStateText(t *testing.T) {
	for st := ReceiptDelivered; st <= ReceiptAcked; st++ {
		b, err := st.MarshalText()
		if err != nil {
			t.Fatal(err)
		}
		var back ReceiptState
		if err := back.UnmarshalText(b); err != nil || back != st {
			t.Errorf("%v: round trip got %v, %v", st, back, err)
		}
	}
	if _, err := ReceiptState(9).MarshalText(); err == nil {
		t.Error("MarshalText of an unknown state must fail")
	}
	if got := ReceiptState(9).String(); got != "ReceiptState(9)" {
		t.Errorf("String: got %q", got)
	}
}

// FuzzParseReceipt: nothing panics, and an accepted receipt re-encodes to the bytes its signature
// covers (the canonical form of the record as received).
func FuzzParseReceipt(f *testing.F) {
	for _, c := range loadCases[receiptCase](f, "receipt.json") {
		if c.Wire != "" {
			f.Add([]byte(c.Wire))
		}
	}
	f.Add([]byte(`{"rec":{},"sig":""}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ParseReceipt(data)
		if err != nil {
			return
		}
		tree, err := ParseJSON(data)
		if err != nil {
			t.Fatalf("accepted unparseable JSON: %v", err)
		}
		want, err := Canonical(tree.(map[string]any)["rec"])
		if err != nil {
			t.Fatalf("canonical of the received record: %v", err)
		}
		got, err := s.Rec.SigningInput()
		if err != nil {
			t.Fatalf("signing input of an accepted record: %v", err)
		}
		if string(got) != string(want) {
			t.Fatalf("re-encoded record differs:\n got %s\nwant %s", got, want)
		}
		if _, err := CheckReceiptWire(s.ItemID(), data, "FUXk5FNVq/ofFbA/ybKIH9N0/ClqW29kM2uu0KlMX28="); err != nil && !errors.Is(err, ErrBadReceipt) {
			t.Fatalf("CheckReceiptWire: untyped error %v", err)
		}
	})
}

func BenchmarkAcceptReceipt(b *testing.B) {
	k := mustKey(b, "IgyUArN1Flej0R95595Za6EnYN/NnHEX1y7ev+cGedg=")
	s, err := SignReceipt(k, "beta", ReceiptInput{Msg: sampleMsg, Agent: "bob", State: ReceiptRead, At: "2026-03-14T09:26:53.589Z", Note: "woke claude session", Seq: 3})
	if err != nil {
		b.Fatal(err)
	}
	wire, err := s.Wire()
	if err != nil {
		b.Fatal(err)
	}
	book := vectorBook("beta", k.PublicKey(), sampleMsg)
	b.ReportAllocs()
	for b.Loop() {
		if _, v, err := AcceptReceipt(book, wire, ""); err != nil || v != ReceiptAccepted {
			b.Fatal(v, err)
		}
	}
}
