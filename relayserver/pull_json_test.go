package relayserver

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/mbx"
)

// jsonFields counts the fields of a struct type that encoding/json writes.
func jsonFields(t reflect.Type) int {
	n := 0
	for f := range t.Fields() {
		if f.IsExported() && f.Tag.Get("json") != "-" {
			n++
		}
	}
	return n
}

// The pull answer written through the scratch buffer is byte for byte what the generic encoder
// writes, strings that need escaping and wires longer than the buffer included, and pageJSONLen
// is its length.
func TestPullJSONMatchesGenericEncoder(t *testing.T) {
	// The hand-written encoder knows these fields; a field added to the answer fails here first.
	if n := jsonFields(reflect.TypeFor[mbx.PullResponse]()); n != 5 {
		t.Fatalf("mbx.PullResponse has %d JSON fields, pageEncoder writes 5", n)
	}
	if n := jsonFields(reflect.TypeFor[mbx.PullItem]()); n != 5 {
		t.Fatalf("mbx.PullItem has %d JSON fields, pageEncoder writes 5", n)
	}
	item := func(seq int64, id string, wire string) Item {
		return Item{Seq: seq, Kind: KindEnvelope, ItemID: id, Sender: "c2VuZGVy+/=", Wire: []byte(wire),
			AcceptedAt: time.UnixMilli(1), ExpiresAt: time.UnixMilli(2)}
	}
	big := func(n int) string { // a wire longer than the scratch buffer, not a multiple of 3
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(i*31 + i/7)
		}
		return string(b)
	}
	pages := []Page{
		{Head: Head{HeadSeq: 0}},
		{Head: Head{HeadSeq: 1773480413589, AckedThrough: 5}, More: true,
			Items: []Item{item(1773480413588, "01HX", "{\"v\":3}"), item(1773480413589, "x-y_z", "")}},
		{Items: []Item{item(7, "ümlaut", "w")}},
		{Items: []Item{item(7, "a\"b\\c\n<&>\u2028", "w")}},
		{Head: Head{HeadSeq: 90}, Items: []Item{item(8, "a", big(encodeScratch+7)), item(9, "b", big(3*encodeScratch+2)), item(90, "c", "x")}},
	}
	for i, page := range pages {
		var want bytes.Buffer
		enc := json.NewEncoder(&want)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(pullResponse("0b1e-epoch", 42, page)); err != nil {
			t.Fatal(err)
		}
		var got bytes.Buffer
		pe := pageEncoder{w: &got, buf: make([]byte, 0, encodeScratch)}
		pe.start("0b1e-epoch", page.HeadSeq)
		last := int64(42)
		for j := range page.Items {
			pe.item(&page.Items[j], j == 0)
			last = page.Items[j].Seq
		}
		pe.end(last, page.More)
		if w := bytes.TrimSuffix(want.Bytes(), []byte("\n")); !bytes.Equal(got.Bytes(), w) {
			t.Errorf("page %d:\n got %.300s\nwant %.300s", i, got.Bytes(), w)
		}
		if n := pageJSONLen("0b1e-epoch", page.HeadSeq, last, page.Items, page.More); n != int64(got.Len()) {
			t.Errorf("page %d: pageJSONLen = %d, the answer has %d bytes", i, n, got.Len())
		}
	}
}

// appendBase64 writes what base64.StdEncoding writes, for every length around its 6-byte steps
// and every byte value.
func TestAppendBase64IsStdEncoding(t *testing.T) {
	src := make([]byte, 300)
	for i := range src {
		src[i] = byte(i*7 + i/256)
	}
	for n := range len(src) {
		for _, prefix := range []string{"", "x"} {
			got := appendBase64([]byte(prefix), src[n%11:n])
			want := base64.StdEncoding.AppendEncode([]byte(prefix), src[n%11:n])
			if !bytes.Equal(got, want) {
				t.Fatalf("appendBase64(%x) = %s, want %s", src[n%11:n], got, want)
			}
		}
	}
	all := make([]byte, 256*3)
	for i := range all {
		all[i] = byte(i / 3 * (1 + i%3))
	}
	if got, want := appendBase64(nil, all), base64.StdEncoding.AppendEncode(nil, all); !bytes.Equal(got, want) {
		t.Fatalf("appendBase64 of all byte values differs:\n%s\n%s", got, want)
	}
}

func BenchmarkAppendBase64(b *testing.B) {
	wire := bytes.Repeat([]byte("0123456789abcdefghij"), 5)
	buf := make([]byte, 0, 256)
	b.Run("std", func(b *testing.B) {
		for b.Loop() {
			buf = base64.StdEncoding.AppendEncode(buf[:0], wire)
		}
	})
	b.Run("pairs", func(b *testing.B) {
		for b.Loop() {
			buf = appendBase64(buf[:0], wire)
		}
	})
}
