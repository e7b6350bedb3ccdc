package relayserver

import (
	"bytes"
	"slices"
	"strconv"

	"github.com/agentmbx/agentmbx/mbx"
)

// appendPushJSON appends the JSON of resp to buf without reflection, byte for byte as writeJSON
// would write it. ok is false when a string needs escaping or a statement is not compact (the
// generic encoder would rewrite it); the caller then takes the generic encoder.
func appendPushJSON(buf []byte, resp mbx.PushResponse) ([]byte, bool) {
	buf = slices.Grow(buf, pushJSONSize(resp))
	buf = append(buf, `{"results":[`...)
	for i, r := range resp.Results {
		if !plainJSON(r.ItemID) || !plainJSON(r.Status) || !plainJSON(r.Sig) ||
			bytes.ContainsAny(r.Accept, " \t\r\n") || r.Targets == nil {
			return buf, false
		}
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = append(append(append(buf, `{"item_id":"`...), r.ItemID...), `","status":"`...)
		buf = append(append(buf, r.Status...), `","targets":[`...)
		for j, t := range r.Targets {
			if !plainJSON(t.HostPubkey) {
				return buf, false
			}
			if j > 0 {
				buf = append(buf, ',')
			}
			buf = append(append(append(buf, `{"host_pubkey":"`...), t.HostPubkey...), `","seq":`...)
			buf = append(strconv.AppendInt(buf, t.Seq, 10), '}')
		}
		buf = append(buf, ']')
		if len(r.Accept) > 0 {
			buf = append(append(buf, `,"accept":`...), r.Accept...)
		}
		if r.Sig != "" {
			buf = append(append(append(buf, `,"sig":"`...), r.Sig...), '"')
		}
		buf = append(buf, '}')
	}
	return append(buf, "]}"...), true
}

// pushJSONSize is about the length of the answer resp.
func pushJSONSize(resp mbx.PushResponse) int {
	n := 16
	for _, r := range resp.Results {
		n += 80 + len(r.ItemID) + len(r.Status) + len(r.Accept) + len(r.Sig)
		for _, t := range r.Targets {
			n += 40 + len(t.HostPubkey)
		}
	}
	return n
}
