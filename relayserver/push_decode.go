package relayserver

import "github.com/agentmbx/agentmbx/mbx"

// decodePushRequest decodes a push body. The body every host sends, {"items":[{"kind", "item_id",
// "targets":[{"host_pubkey", "wire_b64"}]}]} with plain ASCII strings, is read by a small scanner
// (pushScanner) without reflection; anything else (another key, an escape, null, a number, a
// missing member) goes to the generic decoder, so both read every body alike.
func decodePushRequest(body []byte) (mbx.PushRequest, error) {
	if req, ok := scanPushRequest(body); ok {
		return req, nil
	}
	var req mbx.PushRequest
	err := decodeJSON(body, &req)
	return req, err
}

// scanPushRequest reads the plain form of a push body; ok is false for anything else.
func scanPushRequest(body []byte) (req mbx.PushRequest, ok bool) {
	p := pushScanner{b: string(body)} // one copy; every string read is a slice of it
	if !p.open('{') || p.key() != "items" || !p.open('[') {
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
	b string
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
func (p *pushScanner) str() (string, bool) {
	if !p.open('"') {
		return "", false
	}
	start := p.i
	for ; p.i < len(p.b); p.i++ {
		switch c := p.b[p.i]; {
		case c == '"':
			s := p.b[start:p.i]
			p.i++
			return s, true
		case c < 0x20 || c >= 0x7f || c == '\\':
			return "", false
		}
	}
	return "", false
}

// key reads a member name and its colon; "" when there is none.
func (p *pushScanner) key() string {
	k, ok := p.str()
	if !ok || !p.open(':') {
		return ""
	}
	return k
}

// members reads an object whose members are all named in names, each once, with string values
// (the key "targets" is read by targets instead) into vals, in the order of names.
func (p *pushScanner) members(names []string, vals []string, targets *[]mbx.PushTarget) bool {
	if !p.open('{') {
		return false
	}
	seen := 0
	for first := true; !p.close('}'); first = false {
		if !first && !p.comma() {
			return false
		}
		k := p.key()
		if k == "targets" && targets != nil && *targets == nil {
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

func indexOf(names []string, k string) int {
	for j, n := range names {
		if n == k {
			return j
		}
	}
	return -1
}

var (
	itemMembers   = []string{"kind", "item_id"}
	targetMembers = []string{"host_pubkey", "wire_b64"}
)

func (p *pushScanner) item() (mbx.PushItem, bool) {
	var vals [2]string
	var targets []mbx.PushTarget
	if !p.members(itemMembers, vals[:], &targets) || targets == nil {
		return mbx.PushItem{}, false
	}
	return mbx.PushItem{Kind: vals[0], ItemID: vals[1], Targets: targets}, true
}

func (p *pushScanner) targets() ([]mbx.PushTarget, bool) {
	if !p.open('[') {
		return nil, false
	}
	out := []mbx.PushTarget{}
	for first := true; !p.close(']'); first = false {
		if !first && !p.comma() {
			return nil, false
		}
		var vals [2]string
		if !p.members(targetMembers, vals[:], nil) {
			return nil, false
		}
		out = append(out, mbx.PushTarget{HostPubkey: vals[0], WireB64: vals[1]})
	}
	return out, true
}
