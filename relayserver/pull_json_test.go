package relayserver

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/mbx"
)

// The pull answer written by hand is byte for byte what the generic encoder writes, for every
// page it takes on, and gives way to it for strings that need escaping.
func TestPullJSONMatchesGenericEncoder(t *testing.T) {
	// The hand-written encoder knows these fields; a field added to the answer fails here first.
	if n := reflect.TypeFor[mbx.PullResponse]().NumField(); n != 5 {
		t.Fatalf("mbx.PullResponse has %d fields, appendPullJSON writes 5", n)
	}
	if n := reflect.TypeFor[mbx.PullItem]().NumField(); n != 5 {
		t.Fatalf("mbx.PullItem has %d fields, appendPullJSON writes 5", n)
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
