package relayserver

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/agentmbx/agentmbx/mbx"
)

// Whatever push body the scanner takes on, it reads as the generic decoder does; the hosts' own
// bodies are taken on.
func FuzzScanPushRequest(f *testing.F) {
	for _, body := range []string{
		`{"items":[{"kind":"envelope","item_id":"A1","targets":[{"host_pubkey":"a2V5","wire_b64":"e30="}]}]}`,
		" {\n\"items\" : [ {\"targets\":[{\"wire_b64\":\"e30=\",\"host_pubkey\":\"a2V5\"},{\"host_pubkey\":\"b\",\"wire_b64\":\"c\"}],\"item_id\":\"A1\",\"kind\":\"receipt\"} ] }\t",
		`{"items":[{"kind":"envelope","item_id":"A1","targets":[]}]}`,
		`{"items":[]}`, `{"items":null}`, `{}`, `[]`, ``, `{"items":[{}]}`,
		`{"items":[{"kind":"envelope","item_id":"A\u0031","targets":[]}]}`,
		`{"items":[{"Kind":"envelope","item_id":"A1","targets":[]}]}`,
		`{"items":[{"kind":"envelope","kind":"receipt","item_id":"A1","targets":[]}]}`,
		`{"items":[{"kind":"envelope","item_id":"A1","targets":[],"targets":[{"host_pubkey":"k","wire_b64":"w"}]}]}`,
		`{"items":[{"kind":"envelope","item_id":"A1","targets":[],"extra":1}]}`,
		`{"items":[{"kind":"envelope","item_id":"A1","targets":[]},]}`,
		`{"items":[{"kind":"envelope","item_id":"A1","targets":[]}]} x`,
		`{"items":[{"kind":"envelope","item_id":"A1","targets":[]}],"items":[]}`,
		`{"items":[{"kind":null,"item_id":"A1","targets":[]}]}`,
		"{\"items\":[{\"kind\":\"env\xffelope\",\"item_id\":\"A1\",\"targets\":[]}]}",
	} {
		f.Add([]byte(body))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		got, ok := scanPushRequest(body)
		if !ok {
			return
		}
		var req mbx.PushRequest
		if err := decodeJSON(body, &req); err != nil {
			t.Fatalf("scanner took %q, the decoder refuses it: %v", body, err)
		}
		if want := fromPushRequest(req); !reflect.DeepEqual(got, want) {
			t.Fatalf("%q:\nscanner %+v\ndecoder %+v", body, got, want)
		}
	})
}

// decodeWire reads every wire_b64 as mbx.DecodeB64Lenient does.
func FuzzDecodeWire(f *testing.F) {
	for _, s := range []string{"e30=", "e30", "e3-_", "e30==", "e\r\n30", "a", "ab=c", "", "////", "_-_-"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := decodeWire(b)
		want, werr := mbx.DecodeB64Lenient(string(b))
		if (err == nil) != (werr == nil) || !bytes.Equal(got, want) {
			t.Fatalf("%q: decodeWire %x %v, DecodeB64Lenient %x %v", b, got, err, want, werr)
		}
	})
}

func TestScanPushRequestTakesHostBodies(t *testing.T) {
	body := []byte(`{"items":[{"kind":"envelope","item_id":"01KKNTQ2CN9WJ3MR4Q1P12F02T","targets":[` +
		`{"host_pubkey":"PqB2qlCjtiaGXy3fqlIFgClovZG6lvG/xwcOruhk4n0=","wire_b64":"eyJ2IjozfQ=="}]},` +
		`{"kind":"receipt","item_id":"r1","targets":[{"host_pubkey":"a","wire_b64":"b"},{"host_pubkey":"c","wire_b64":"d"}]}]}`)
	req, ok := scanPushRequest(body)
	if !ok || len(req.Items) != 2 || len(req.Items[1].Targets) != 2 || string(req.Items[0].Targets[0].WireB64) != "eyJ2IjozfQ==" {
		t.Fatalf("scan = %+v, %v", req, ok)
	}
}

// BenchmarkPushDecode decodes a 200-item push body with the scanner and the generic decoder.
func BenchmarkPushDecode(b *testing.B) {
	req := mbx.PushRequest{Items: make([]mbx.PushItem, 200)}
	for i := range req.Items {
		req.Items[i] = mbx.PushItem{Kind: "envelope", ItemID: "01KKNTQ2CN9WJ3MR4Q1P12F02T", Targets: []mbx.PushTarget{{
			HostPubkey: "PqB2qlCjtiaGXy3fqlIFgClovZG6lvG/xwcOruhk4n0=", WireB64: mbx.B64(make([]byte, 300))}}}
	}
	body, err := json.Marshal(req)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("scanner", func(b *testing.B) {
		for range b.N {
			if _, ok := scanPushRequest(body); !ok {
				b.Fatal("not taken")
			}
		}
	})
	b.Run("decoder", func(b *testing.B) {
		for range b.N {
			var r mbx.PushRequest
			if err := decodeJSON(body, &r); err != nil {
				b.Fatal(err)
			}
		}
	})
}
