package relayserver

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/mbx"
)

// The push answer written by hand is byte for byte what the generic encoder writes, for every
// answer it takes on, and gives way to it for strings that need escaping and statements that are
// not compact.
func TestPushJSONMatchesGenericEncoder(t *testing.T) {
	// The hand-written encoder knows these fields; a field added to the answer fails here first.
	for typ, n := range map[reflect.Type]int{reflect.TypeFor[mbx.PushResponse](): 1,
		reflect.TypeFor[mbx.PushResult](): 5, reflect.TypeFor[mbx.ResultTarget](): 2} {
		if typ.NumField() != n {
			t.Fatalf("%s has %d fields, appendPushJSON writes %d", typ, typ.NumField(), n)
		}
	}
	key, err := mbx.GenerateSigningKey(bytes.NewReader(bytes.Repeat([]byte{7}, 64)))
	if err != nil {
		t.Fatal(err)
	}
	accept := func(id string, seqs ...int64) mbx.PushResult {
		var targets []mbx.AcceptTarget
		for i, s := range seqs {
			targets = append(targets, mbx.AcceptTarget{HostPubkey: "dGFyZ2V0" + string(rune('A'+i)) + "+/=",
				Seq: s, WireHash: mbx.WireHash([]byte(id))})
		}
		a := mbx.NewAccept(key.PublicKey(), "0b1e-epoch", "c2VuZGVy+/=", id, targets, time.UnixMilli(1773480413589).UTC())
		r, err := mbx.AcceptedResult(key, mbx.StatusAccepted, a)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	dup := accept("01HXdup", 9007199254740991)
	dup.Status = mbx.StatusDuplicate
	spaced := accept("01HXspaced", 1)
	spaced.Accept = json.RawMessage(`{"v": 1}`)
	answers := []struct {
		resp  mbx.PushResponse
		plain bool
	}{
		{mbx.PushResponse{Results: []mbx.PushResult{}}, true},
		{mbx.PushResponse{Results: []mbx.PushResult{accept("01HX", 1773480413589)}}, true},
		{mbx.PushResponse{Results: []mbx.PushResult{accept("a", 1, 2, 3), dup,
			mbx.RejectedResult("x-y_z", RejectSender), mbx.RejectedResult("q", RejectQueueBytes)}}, true},
		{mbx.PushResponse{Results: []mbx.PushResult{mbx.RejectedResult("ümlaut", RejectConflict)}}, false},
		{mbx.PushResponse{Results: []mbx.PushResult{accept("a", 1), mbx.RejectedResult("a\"b\\c\n<&>", RejectRate)}}, false},
		{mbx.PushResponse{Results: []mbx.PushResult{spaced}}, false},
		{mbx.PushResponse{Results: []mbx.PushResult{{ItemID: "nil-targets", Status: "rejected:rate"}}}, false},
	}
	for i, c := range answers {
		var want bytes.Buffer
		enc := json.NewEncoder(&want)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(c.resp); err != nil {
			t.Fatal(err)
		}
		got, ok := appendPushJSON(nil, c.resp)
		if ok != c.plain {
			t.Errorf("answer %d: hand-written = %v, want %v", i, ok, c.plain)
		}
		if ok && !bytes.Equal(got, bytes.TrimSuffix(want.Bytes(), []byte("\n"))) {
			t.Errorf("answer %d:\n got %s\nwant %s", i, got, want.Bytes())
		}
	}
}

// BenchmarkPushAnswer writes a 200-item push answer by hand and with the generic encoder.
func BenchmarkPushAnswer(b *testing.B) {
	key, err := mbx.GenerateSigningKey(bytes.NewReader(bytes.Repeat([]byte{7}, 64)))
	if err != nil {
		b.Fatal(err)
	}
	resp := mbx.PushResponse{Results: make([]mbx.PushResult, 200)}
	for i := range resp.Results {
		a := mbx.NewAccept(key.PublicKey(), "0b1e-epoch", key.PublicKey(), "01KKNTQ2CN9WJ3MR4Q1P12F02T",
			[]mbx.AcceptTarget{{HostPubkey: key.PublicKey(), Seq: int64(i), WireHash: mbx.WireHash(nil)}}, time.Now())
		if resp.Results[i], err = mbx.AcceptedResult(key, mbx.StatusAccepted, a); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("hand", func(b *testing.B) {
		var buf []byte
		for range b.N {
			buf, _ = appendPushJSON(buf[:0], resp)
		}
	})
	b.Run("generic", func(b *testing.B) {
		var buf bytes.Buffer
		for range b.N {
			buf.Reset()
			enc := json.NewEncoder(&buf)
			enc.SetEscapeHTML(false)
			_ = enc.Encode(resp)
		}
	})
}

// BenchmarkEnvelopeCheck checks a 1 KiB envelope in place and through the generic decoder.
func BenchmarkEnvelopeCheck(b *testing.B) {
	id := "01KKNTQ2CN9WJ3MR4Q1P12F02T"
	wire := []byte(`{"v":3,"id":"` + id + `","from":"ann@alpha","to":["bob@beta"],"enc":{"v":1,"alg":"x25519+xchacha20poly1305","epk":"` +
		string(bytes.Repeat([]byte("A"), 43)) + `"},"body":"` + string(bytes.Repeat([]byte("B"), 900)) + `"}`)
	b.Run("in-place", func(b *testing.B) {
		for range b.N {
			if checkEnvelopeWire(id, wire) != "" {
				b.Fatal("refused")
			}
		}
	})
	b.Run("decoded", func(b *testing.B) {
		for range b.N {
			if checkEnvelopeDecoded(id, wire) != "" {
				b.Fatal("refused")
			}
		}
	})
}
