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

// The pull answer written by hand is byte for byte what the generic encoder writes, for every
// page it takes on, and gives way to it for strings that need escaping.
func TestPullJSONMatchesGenericEncoder(t *testing.T) {
	// The hand-written encoder knows these fields; a field added to the answer fails here first.
	if n := jsonFields(reflect.TypeFor[mbx.PullResponse]()); n != 5 {
		t.Fatalf("mbx.PullResponse has %d JSON fields, appendPullJSON writes 5", n)
	}
	if n := jsonFields(reflect.TypeFor[mbx.PullItem]()); n != 5 {
		t.Fatalf("mbx.PullItem has %d JSON fields, appendPullJSON writes 5", n)
	}
	item := func(seq int64, id string, wire string) Item {
		return Item{Seq: seq, Kind: KindEnvelope, ItemID: id, Sender: "c2VuZGVy+/=", Wire: []byte(wire),
			AcceptedAt: time.UnixMilli(1), ExpiresAt: time.UnixMilli(2)}
	}
	pages := []struct {
		page  Page
		plain bool
	}{
		{Page{Head: Head{HeadSeq: 0}}, true},
		{Page{Head: Head{HeadSeq: 1773480413589, AckedThrough: 5}, More: true,
			Items: []Item{item(1773480413588, "01HX", "{\"v\":3}"), item(1773480413589, "x-y_z", "")}}, true},
		{Page{Items: []Item{item(7, "ümlaut", "w")}}, false},
		{Page{Items: []Item{item(7, "a\"b\\c\n<&>", "w")}}, false},
	}
	for i, c := range pages {
		var want bytes.Buffer
		enc := json.NewEncoder(&want)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(pullResponse("0b1e-epoch", 42, c.page)); err != nil {
			t.Fatal(err)
		}
		got, ok := appendPullJSON(nil, "0b1e-epoch", 42, c.page)
		if ok != c.plain {
			t.Errorf("page %d: hand-written = %v, want %v", i, ok, c.plain)
		}
		if ok && !bytes.Equal(got, bytes.TrimSuffix(want.Bytes(), []byte("\n"))) {
			t.Errorf("page %d:\n got %s\nwant %s", i, got, want.Bytes())
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
