package mbx

import (
	"encoding/json"
	"errors"
	"os"
	"testing"
)

// ownVectors is the directory of agentmbx's own vectors (records this implementation adds, which
// 0.5.x never produced): testdata/vectors/agentmbx/README.md.
const ownVectors = "testdata/vectors/agentmbx"

type lanAcceptCase struct {
	Name   string `json:"name"`
	Expect string `json:"expect"`
	// Positive cases.
	TargetSeed   string          `json:"target_seed_b64"`
	TargetPubkey string          `json:"target_pubkey"`
	SenderPubkey string          `json:"sender_pubkey"`
	ItemID       string          `json:"item_id"`
	Wire         string          `json:"wire"`
	WireSHA256   string          `json:"wire_sha256"`
	Statement    json.RawMessage `json:"statement"`
	SigningInput string          `json:"signing_input"`
	Sig          string          `json:"sig"`
	// Negative cases (ItemID and WireSHA256 are the sender's expectations there).
	Error           string          `json:"error"`
	PinnedPubkey    string          `json:"pinned_pubkey"`
	OwnPubkey       string          `json:"own_pubkey"`
	AnswerStatement json.RawMessage `json:"answer_statement"`
	AnswerSig       string          `json:"answer_sig"`
}

// lanAcceptStages maps a negative case's error to the refusal ValidLANAccept must return.
var lanAcceptStages = map[string]error{
	"missing": ErrLANAcceptMissing, "malformed": ErrLANAcceptMalformed, "target": ErrLANAcceptTarget,
	"sender": ErrLANAcceptSender, "item": ErrLANAcceptItem, "wire_hash": ErrLANAcceptWireHash,
	"signature": ErrLANAcceptSignature,
}

// TestLANAcceptVectors replays the LAN accept vectors: every key, hash, signing input and
// signature is recomputed from the file's inputs and compared with the file's outputs, and every
// negative case is refused at the stage the file names.
func TestLANAcceptVectors(t *testing.T) {
	data, err := os.ReadFile(ownVectors + "/lan_accept.json")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Family string          `json:"family"`
		Cases  []lanAcceptCase `json:"cases"`
	}
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	if f.Family != "lan_accept" {
		t.Fatalf("family %q", f.Family)
	}
	pos, neg := 0, 0
	for _, c := range f.Cases {
		t.Run(c.Name, func(t *testing.T) {
			switch c.Expect {
			case "valid":
				pos++
				key, err := SigningKeyFromSeed(c.TargetSeed)
				if err != nil {
					t.Fatal(err)
				}
				if key.PublicKey() != c.TargetPubkey {
					t.Errorf("target key %s, want %s", key.PublicKey(), c.TargetPubkey)
				}
				if h := WireHash([]byte(c.Wire)); h != c.WireSHA256 {
					t.Errorf("wire hash %s, want %s", h, c.WireSHA256)
				}
				a := NewLANAccept(key.PublicKey(), c.SenderPubkey, c.ItemID, []byte(c.Wire))
				if in, err := CanonicalJSON(c.Statement); err != nil || string(in) != c.SigningInput {
					t.Errorf("canonical of the file's statement:\n got %s (%v)\nwant %s", in, err, c.SigningInput)
				}
				stmt, sig, err := SignLANAccept(key, a)
				if err != nil {
					t.Fatal(err)
				}
				if string(stmt) != c.SigningInput {
					t.Errorf("signing input:\n got %s\nwant %s", stmt, c.SigningInput)
				}
				if sig != c.Sig {
					t.Errorf("sig %s, want %s", sig, c.Sig)
				}
				if err := ValidLANAccept(c.Statement, c.Sig, c.TargetPubkey, c.SenderPubkey, c.ItemID, c.WireSHA256); err != nil {
					t.Errorf("check of the file's statement: %v", err)
				}
			case "invalid":
				neg++
				want, ok := lanAcceptStages[c.Error]
				if !ok {
					t.Fatalf("unknown error stage %q", c.Error)
				}
				stmt := c.AnswerStatement
				if string(stmt) == "null" {
					stmt = nil
				}
				err := ValidLANAccept(stmt, c.AnswerSig, c.PinnedPubkey, c.OwnPubkey, c.ItemID, c.WireSHA256)
				if !errors.Is(err, want) {
					t.Errorf("got %v, want %v", err, want)
				}
				if want != ErrLANAcceptMissing && !errors.Is(err, ErrBadLANAccept) {
					t.Errorf("%v is not in the ErrBadLANAccept family", err)
				}
			default:
				t.Fatalf("unknown expect %q", c.Expect)
			}
		})
	}
	if pos == 0 || neg == 0 {
		t.Fatalf("%d positive and %d negative cases: the file must have both", pos, neg)
	}
}
