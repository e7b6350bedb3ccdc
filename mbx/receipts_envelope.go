package mbx

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// Delivery receipts through a v1 relay (docs/protocol.md: Delivery receipts through a v1 relay).
//
// A v1 relay carries envelopes only: it has no receipt items. An agentmbx host that reaches a peer
// only through one sends the delivery receipts it owes that peer inside an ordinary envelope v3,
// signed by its host key and sealed for the peer's enc key like any mail:
//
//	from:    "mbx@<this host>"
//	to:      ["mbx.receipts@<peer host>"]
//	kind:    "status"
//	subject: "delivery receipts"
//	body:    {"receipts":[<receipt wire>, …]}, each wire the exact canonical {rec, sig}
//
// The peer applies each receipt as if it came as a receipt item (the same acceptReceipt rules:
// signed by the recipient host, for a message the peer sent to it). "mbx.receipts" cannot be an
// agent's name (names are [a-z0-9-]), so a host that does not know this envelope (0.5.x, or an
// older agentmbx) delivers it to no mailbox.

const (
	receiptsFrom    = "mbx"
	receiptsTo      = "mbx.receipts"
	receiptsSubject = "delivery receipts"
)

// ErrReceiptsEnvelope is the family of refusals of a receipts envelope's body.
var ErrReceiptsEnvelope = errors.New("bad receipts envelope")

// receiptsBody is the body of a receipts envelope.
type receiptsBody struct {
	Receipts []json.RawMessage `json:"receipts"`
}

// ReceiptsDraft is the draft of the envelope that carries the receipt wires from host to the
// peer target. Each wire must be a JSON object (a receipt's canonical {rec, sig}); it is put in
// the body byte for byte.
func ReceiptsDraft(host, target string, wires ...[]byte) (Draft, error) {
	if len(wires) == 0 {
		return Draft{}, fmt.Errorf("%w: no receipts", ErrReceiptsEnvelope)
	}
	var b bytes.Buffer
	b.WriteString(`{"receipts":[`)
	for i, w := range wires {
		if len(w) == 0 || w[0] != '{' || !json.Valid(w) {
			return Draft{}, fmt.Errorf("%w: receipt %d is not a JSON object", ErrReceiptsEnvelope, i)
		}
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(w)
	}
	b.WriteString(`]}`)
	if b.Len() > MaxBody {
		return Draft{}, fmt.Errorf("%w: %d bytes of receipts, over the body limit", ErrReceiptsEnvelope, b.Len())
	}
	return Draft{From: receiptsFrom + "@" + host, To: []string{receiptsTo + "@" + target}, Kind: KindStatus,
		Subject: receiptsSubject, Body: b.String()}, nil
}

// IsReceiptsEnvelope reports whether e is a receipts envelope from host to target (its from, to
// and kind; the body is read by Receipts).
func IsReceiptsEnvelope(e *Envelope, host, target string) bool {
	return e != nil && e.From == receiptsFrom+"@"+host && len(e.To) == 1 && e.To[0] == receiptsTo+"@"+target &&
		e.Kind == KindStatus
}

// Receipts returns the receipt wires of a receipts envelope's opened body, each exactly as it
// was put in. A body that is not {"receipts":[object, …]} is ErrReceiptsEnvelope.
func Receipts(body string) ([][]byte, error) {
	var rb receiptsBody
	dec := json.NewDecoder(bytes.NewReader([]byte(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rb); err != nil || len(rb.Receipts) == 0 {
		return nil, fmt.Errorf("%w: body is not {receipts:[…]}", ErrReceiptsEnvelope)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%w: more after the body's object", ErrReceiptsEnvelope)
	}
	out := make([][]byte, len(rb.Receipts))
	for i, w := range rb.Receipts {
		if len(w) == 0 || w[0] != '{' {
			return nil, fmt.Errorf("%w: receipt %d is not an object", ErrReceiptsEnvelope, i)
		}
		out[i] = bytes.Clone(w)
	}
	return out, nil
}
