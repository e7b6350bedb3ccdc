package relayserver

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

var errOver = errors.New("over")

func testCounter(maxBatch, maxTargets int, name string) *batchCounter {
	return &batchCounter{batchName: name, maxBatch: maxBatch, maxTargets: maxTargets,
		over: func(role scanRole, item, n int) error {
			return fmt.Errorf("%w: role %d item %d n %d", errOver, role, item, n)
		}}
}

// feed scans body in chunks of n bytes (all at once when n <= 0).
func feed(c *batchCounter, body string, n int) error {
	if n <= 0 {
		n = len(body)
	}
	for len(body) > 0 {
		k := min(n, len(body))
		if err := c.Scan([]byte(body[:k])); err != nil {
			return err
		}
		body = body[k:]
	}
	return nil
}

func items(n, targets int, tricky bool) string {
	var b strings.Builder
	b.WriteString(`{"items":[`)
	for i := range n {
		if i > 0 {
			b.WriteString(" , ")
		}
		id := fmt.Sprintf("id%d", i)
		if tricky {
			id = fmt.Sprintf(`i\"[{,]}\\\\d%d\\`, i) // quotes, brackets, commas and backslashes inside the string
		}
		fmt.Fprintf(&b, `{"kind":"envelope","item_id":"%s","targets":[`, id)
		for j := range targets {
			if j > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `{"host_pubkey":"k%d","wire_b64":"e30="}`, j)
		}
		b.WriteString("]}")
	}
	b.WriteString("]}")
	return b.String()
}

func TestBatchCounterRefusesOneTooMany(t *testing.T) {
	for _, tc := range []struct {
		name    string
		body    string
		refused bool
	}{
		{"at max_batch", items(3, 1, false), false},
		{"one item too many", items(4, 1, false), true},
		{"strings with brackets and escapes", items(3, 1, true), false},
		{"tricky strings, one too many", items(4, 1, true), true},
		{"at max_targets", items(1, 2, false), false},
		{"one target too many", items(1, 3, false), true},
		{"empty batch", `{"items":[]}`, false},
		{"other members are not counted", `{"pad":[1,2,3,4,5,6],"items":[{}]}`, false},
		{"a nested array named items is not the batch", `{"x":{"items":[1,2,3,4,5]},"items":[]}`, false},
		{"case-folded name", `{"ITEMS":[1,2,3,4]}`, true},
		{"escaped name", `{"it\u0065ms":[1,2,3,4]}`, true},
		{"non-ASCII name", `{"itemſ":[1,2,3,4]}`, true},
		{"items under another name", `{"itemz":[1,2,3,4]}`, false},
		{"a long value string", `{"items":["` + strings.Repeat(`ab\"`, 1000) + `",2,3]}`, false},
		{"backslash run before the quote", `{"items":["a\\\\",2,3,4]}`, true},
		{"targets of the second item", `{"items":[{"targets":[1]},{"targets":[1,2,3]}]}`, true},
		{"targets outside an item", `{"targets":[1,2,3],"items":[]}`, false},
		{"deep nesting", `{"items":[[[[[[[[1,2,3,4,5]]]]]]]]}`, false},
	} {
		for _, chunk := range []int{0, 1, 2, 3, 7} {
			err := feed(testCounter(3, 2, "items"), tc.body, chunk)
			if got := errors.Is(err, errOver); got != tc.refused {
				t.Errorf("%s (chunks of %d): refused = %v (%v), want %v", tc.name, chunk, got, err, tc.refused)
			}
		}
	}
}

func TestBatchCounterStopsAtTheExtraItem(t *testing.T) {
	body := items(5000, 1, false)
	c := testCounter(200, 64, "items")
	consumed := 0
	var err error
	for i := 0; i < len(body) && err == nil; i += 64 {
		chunk := body[i:min(i+64, len(body))]
		err = c.Scan([]byte(chunk))
		consumed += len(chunk)
	}
	if !errors.Is(err, errOver) {
		t.Fatalf("5,000 items = %v, want refused", err)
	}
	if per := len(body) / 5000; consumed > 202*per {
		t.Fatalf("refused after %d bytes, past item 201 (%d bytes an item)", consumed, per)
	}
}

// FuzzBatchCounter: whatever the body and however it arrives, a body the decoder reads with more
// items or targets than allowed is refused by the counter.
func FuzzBatchCounter(f *testing.F) {
	for _, s := range []string{items(4, 1, true), items(2, 3, false), `{"ITEMS":[1,2,3,4]}`, `{"items":[]}`,
		`{"items":[{"kind":"envelope","item_id":"a\u0022","targets":[{"host_pubkey":"x","wire_b64":"y"}]}]}`} {
		f.Add(s, 3)
	}
	f.Fuzz(func(t *testing.T, body string, chunk int) {
		err := feed(testCounter(3, 2, "items"), body, chunk%17)
		req, derr := decodePushRequest([]byte(body))
		if derr != nil || err != nil {
			return
		}
		if len(req.Items) > 3 {
			t.Fatalf("counter passed %d items", len(req.Items))
		}
		for i, it := range req.Items {
			if len(it.Targets) > 2 {
				t.Fatalf("counter passed %d targets in item %d", len(it.Targets), i)
			}
		}
	})
}
