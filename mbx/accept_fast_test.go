package mbx

import (
	"bytes"
	"fmt"
	"testing"
	"time"
)

// The relay's hand-written accept JSON is byte for byte what the generic encoders write, and
// gives way to them for anything it does not spell itself.
func TestAcceptJSONFastPathMatchesGeneric(t *testing.T) {
	at := time.UnixMilli(1773480413589)
	targets := []AcceptTarget{{HostPubkey: "k1+/=", Seq: 1773480413589, WireHash: "ab12"}, {HostPubkey: "k2", Seq: 7, WireHash: "cd"}}
	cases := []Accept{
		NewAccept("relay", "e-1", "sender", "item", targets, at),
		NewAccept("relay", "e-1", "sender", "item", nil, at),
		NewAccept("relay", "e-1", "sender", "it<&>em", targets[:1], at),
		{V: 1, Type: "relay-accept", Targets: nil},
		NewAccept("relay", "e-1", "sender", "ümlaut\u2028", targets, at),
		NewAccept("relay", "e-1", "sender", "quote\"back\\slash\n", targets, at),
		NewAccept("relay", "e-1", "sender", "big", []AcceptTarget{{HostPubkey: "k", Seq: 1<<53 + 1}}, at),
	}
	for i, a := range cases {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			got, err := a.SigningInput()
			if err != nil {
				t.Fatal(err)
			}
			want, err := Canonical(a)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("signing input\n got %s\nwant %s", got, want)
			}
			raw, err := MarshalJSON(a)
			if err != nil {
				t.Fatal(err)
			}
			if fast, ok := appendAcceptJSON(nil, a, false); ok && !bytes.Equal(fast, raw) {
				t.Errorf("accept JSON\n got %s\nwant %s", fast, raw)
			}
		})
	}
}
