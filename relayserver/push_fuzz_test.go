package relayserver_test

import (
	"testing"

	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/relayserver"
)

// envelopeVerdict is the envelope check written the plain way, over a whole parsed tree: the
// reference the relay's raw-member check must agree with.
func envelopeVerdict(itemID string, wire []byte) string {
	v, err := mbx.ParseJSON(wire)
	if err != nil {
		return relayserver.RejectBadEnvelope
	}
	m, ok := v.(map[string]any)
	if !ok {
		return relayserver.RejectBadEnvelope
	}
	if id, _ := m["id"].(string); id != itemID {
		return relayserver.RejectEnvelopeID
	}
	if enc, ok := m["enc"].(map[string]any); !ok || enc == nil {
		return relayserver.RejectNotSealed
	}
	return ""
}

func FuzzCheckEnvelopeWire(f *testing.F) {
	for _, w := range []string{
		string(envWire("A1", "")), `{"id":"A1","enc":{}}`, `{"id":"A1","enc":null}`, `{"id":"A1"}`,
		`{"id":"A2","enc":{}}`, `{"id":1,"enc":{}}`, `{"enc":{},"id":"A1","id":"A2"}`, `{"\u0069d":"A1","enc":{}}`,
		`[]`, `null`, `"A1"`, `{"id":"A1","enc":[]}`, `{"id":"A1","enc":"{}"}`, `{"id":"A1","enc":{}} x`,
		`{"id":"A1","enc":{}}  `, `{"id":"A\ud800","enc":{}}`, "{\"id\":\"A1\xff\",\"enc\":{}}", `{"id":null,"enc":{}}`,
		`{"ID":"A1","enc":{}}`, `{"id":"A1","enc": {"v":1e999}}`, ``, `{`,
	} {
		f.Add("A1", []byte(w))
	}
	f.Fuzz(func(t *testing.T, itemID string, wire []byte) {
		if itemID == "" {
			return // parsePush refuses an empty item id before any check
		}
		if got, want := relayserver.CheckEnvelopeWire(itemID, wire), envelopeVerdict(itemID, wire); got != want {
			t.Fatalf("checkEnvelopeWire(%q, %q) = %q, want %q", itemID, wire, got, want)
		}
	})
}
