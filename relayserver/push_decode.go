package relayserver

import (
	"bytes"
	"encoding/base64"

	"github.com/agentmbx/agentmbx/mbx"
)

// pushIn is a decoded push body: mbx.PushRequest with each target's wire_b64 kept as bytes, so
// that the plain form is read without copying the body (the base64 is decoded straight from it).
type pushIn struct{ Items []pushItemIn }

type pushItemIn struct {
	Kind, ItemID string
	Targets      []pushTargetIn
}

type pushTargetIn struct {
	HostPubkey string
	WireB64    []byte
}

// decodePushRequest decodes a push body. The body every host sends, {"items":[{"kind", "item_id",
// "targets":[{"host_pubkey", "wire_b64"}]}]} with plain ASCII strings, is read by a small scanner
// (pushScanner) without reflection or a copy of the body; anything else (another key, an escape,
// null, a number, a missing member) goes to the generic decoder, so both read every body alike.
func decodePushRequest(body []byte) (pushIn, error) {
	if req, ok := scanPushRequest(body); ok {
		return req, nil
	}
	var req mbx.PushRequest
	if err := decodeJSON(body, &req); err != nil {
		return pushIn{}, err
	}
	return fromPushRequest(req), nil
}

// fromPushRequest is req as a pushIn.
func fromPushRequest(req mbx.PushRequest) pushIn {
	var in pushIn
	if req.Items != nil {
		in.Items = make([]pushItemIn, len(req.Items))
	}
	for i, it := range req.Items {
		in.Items[i] = pushItemIn{Kind: it.Kind, ItemID: it.ItemID}
		if it.Targets != nil {
			in.Items[i].Targets = make([]pushTargetIn, len(it.Targets))
		}
		for j, t := range it.Targets {
			in.Items[i].Targets[j] = pushTargetIn{HostPubkey: t.HostPubkey, WireB64: []byte(t.WireB64)}
		}
	}
	return in
}

// decodeWire decodes a target's wire_b64 as mbx.DecodeB64Lenient does: plain standard base64 (the
// hosts' form) straight from the body's bytes, anything else through DecodeB64Lenient.
func decodeWire(b []byte) ([]byte, error) {
	b = bytes.TrimRight(b, "=")
	if len(b)%4 == 1 || bytes.ContainsAny(b, "-_\r\n") {
		return mbx.DecodeB64Lenient(string(b))
	}
	wire := make([]byte, base64.RawStdEncoding.DecodedLen(len(b)))
	n, err := base64.RawStdEncoding.Decode(wire, b)
	if err != nil {
		return nil, mbx.ErrBadBase64
	}
	return wire[:n], nil
}

// scanPushRequest reads the plain form of a push body; ok is false for anything else.
func scanPushRequest(body []byte) (req pushIn, ok bool) {
	p := pushScanner{b: body} // every wire_b64 read is a slice of it
	if !p.open('{') || string(p.key()) != "items" || !p.open('[') {
		return req, false
	}
	for first := true; !p.close(']'); first = false {
		if !first && !p.comma() {
			return req, false
		}
		it, ok := p.item()
		if !ok {
			return req, false
		}
		req.Items = append(req.Items, it)
	}
	if req.Items == nil || !p.close('}') {
		return req, false
	}
	p.space()
	return req, p.i == len(p.b)
}

// pushScanner is a cursor over a push body; every method reports a mismatch by its result and
// the caller then gives up.
type pushScanner struct {
	b []byte
	i int
}

func (p *pushScanner) space() {
	for p.i < len(p.b) && (p.b[p.i] == ' ' || p.b[p.i] == '\t' || p.b[p.i] == '\n' || p.b[p.i] == '\r') {
		p.i++
	}
}

// open and close consume c after optional space.
func (p *pushScanner) open(c byte) bool {
	p.space()
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

func (p *pushScanner) close(c byte) bool { return p.open(c) }

func (p *pushScanner) comma() bool { return p.open(',') }

// str reads a string of printable ASCII without escapes; ok is false for anything else.
func (p *pushScanner) str() ([]byte, bool) {
	if !p.open('"') {
		return nil, false
	}
	start := p.i
	for ; p.i < len(p.b); p.i++ {
		switch c := p.b[p.i]; {
		case c == '"':
			s := p.b[start:p.i]
			p.i++
			return s, true
		case c < 0x20 || c >= 0x7f || c == '\\':
			return nil, false
		}
	}
	return nil, false
}

// key reads a member name and its colon; nil when there is none.
func (p *pushScanner) key() []byte {
	k, ok := p.str()
	if !ok || !p.open(':') {
		return nil
	}
	return k
}

// members reads an object whose members are all named in names, each once, with string values
// (the key "targets" is read by targets instead) into vals, in the order of names.
func (p *pushScanner) members(names []string, vals [][]byte, targets *[]pushTargetIn) bool {
	if !p.open('{') {
		return false
	}
	seen := 0
	for first := true; !p.close('}'); first = false {
		if !first && !p.comma() {
			return false
		}
		k := p.key()
		if string(k) == "targets" && targets != nil && *targets == nil {
			t, ok := p.targets()
			if !ok {
				return false
			}
			*targets = t
			continue
		}
		j := indexOf(names, k)
		if j < 0 || seen&(1<<j) != 0 {
			return false
		}
		seen |= 1 << j
		v, ok := p.str()
		if !ok {
			return false
		}
		vals[j] = v
	}
	return seen == 1<<len(names)-1
}

func indexOf(names []string, k []byte) int {
	for j, n := range names {
		if n == string(k) {
			return j
		}
	}
	return -1
}

var (
	itemMembers   = []string{"kind", "item_id"}
	targetMembers = []string{"host_pubkey", "wire_b64"}
)

func (p *pushScanner) item() (pushItemIn, bool) {
	var vals [2][]byte
	var targets []pushTargetIn
	if !p.members(itemMembers, vals[:], &targets) || targets == nil {
		return pushItemIn{}, false
	}
	return pushItemIn{Kind: string(vals[0]), ItemID: string(vals[1]), Targets: targets}, true
}

func (p *pushScanner) targets() ([]pushTargetIn, bool) {
	if !p.open('[') {
		return nil, false
	}
	out := []pushTargetIn{}
	for first := true; !p.close(']'); first = false {
		if !first && !p.comma() {
			return nil, false
		}
		var vals [2][]byte
		if !p.members(targetMembers, vals[:], nil) {
			return nil, false
		}
		out = append(out, pushTargetIn{HostPubkey: string(vals[0]), WireB64: vals[1]})
	}
	return out, true
}
