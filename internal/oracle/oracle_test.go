package oracle

import (
	"reflect"
	"strings"
	"testing"
)

func mb(s string) Mailbox {
	a, h, _ := strings.Cut(s, "@")
	return Mailbox{h, a}
}

// once is a copy delivered once, in state notified.
func once(id string) Copy { return Copy{ID: id, State: "notified", Deliveries: 1} }

func TestCountFindsLossDuplicationAndMisdelivery(t *testing.T) {
	sent := []Sent{
		{ID: "a", To: []Mailbox{mb("x@h1"), mb("y@h2")}},
		{ID: "b", To: []Mailbox{mb("x@h1")}},
		{ID: "c", To: []Mailbox{mb("y@h2")}},
	}
	twice := once("b")
	twice.Deliveries = 2
	uncounted := once("b")
	uncounted.Deliveries = 0
	tests := []struct {
		name  string
		boxes map[Mailbox][]Copy
		want  Tally
	}{
		{"all once", map[Mailbox][]Copy{mb("x@h1"): {once("a"), once("b"), once("alert-id")}, mb("y@h2"): {once("a"), once("c")}},
			Tally{Messages: 3, Delivered: 3}},
		{"one copy lost", map[Mailbox][]Copy{mb("x@h1"): {once("a"), once("b")}, mb("y@h2"): {once("c")}},
			Tally{Messages: 3, Delivered: 2, Lost: 1}},
		{"one listed twice", map[Mailbox][]Copy{mb("x@h1"): {once("a"), once("b"), once("b")}, mb("y@h2"): {once("a"), once("c")}},
			Tally{Messages: 3, Delivered: 2, Duplicated: 1}},
		{"one listed once, delivered twice", map[Mailbox][]Copy{mb("x@h1"): {once("a"), twice}, mb("y@h2"): {once("a"), once("c")}},
			Tally{Messages: 3, Delivered: 2, Duplicated: 1}},
		{"one in the wrong box", map[Mailbox][]Copy{mb("x@h1"): {once("a"), once("b"), once("c")}, mb("y@h2"): {once("a"), once("c")}},
			Tally{Messages: 3, Delivered: 2, Misdelivered: 1}},
		{"one without a count", map[Mailbox][]Copy{mb("x@h1"): {once("a"), uncounted}, mb("y@h2"): {once("a"), once("c")}},
			Tally{Messages: 3, Delivered: 3, Uncounted: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Count(sent, tt.boxes, nil)
			problems := got.Problems
			got.Problems = nil
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("Count = %+v, want %+v", got, tt.want)
			}
			if got.OK() != (tt.name == "all once") || (len(problems) == 0) != got.OK() {
				t.Fatalf("OK %v with problems %v", got.OK(), problems)
			}
		})
	}
}

// A copy seen read, or moved to read by the scenario, and later seen unread, went back; moving
// forward, staying, or another copy of the same id are fine. Every look counts, not only the last.
func TestWatchFindsACopyGoneBack(t *testing.T) {
	sent := []Sent{{ID: "a", To: []Mailbox{mb("x@h1"), mb("y@h2")}}}
	look := func(w *Watch, x, y string) Tally {
		return Count(sent, map[Mailbox][]Copy{
			mb("x@h1"): {{ID: "a", State: x, Deliveries: 1}},
			mb("y@h2"): {{ID: "a", State: y, Deliveries: 1}},
		}, w)
	}
	var w Watch
	for _, st := range [][2]string{{"delivered", "delivered"}, {"notified", "delivered"}, {"read", "notified"}, {"acked", "notified"}} {
		if got := look(&w, st[0], st[1]); !got.OK() {
			t.Fatalf("forward to %v: %+v", st, got)
		}
	}
	w.Moved(mb("y@h2"), "a", "read")
	got := look(&w, "acked", "notified") // y's copy was moved to read by the scenario
	if got.WentBack != 1 || got.OK() || !strings.Contains(strings.Join(got.Problems, "\n"), "went back: the copy of a in y@h2 was read, then seen notified") {
		t.Fatalf("after a copy went back: %+v", got)
	}
	if got := look(&w, "acked", "notified"); got.WentBack != 1 || got.OK() {
		t.Fatalf("a copy seen back again is counted once: %+v", got)
	}
	if got := look(&w, "acked", "read"); got.WentBack != 1 || got.OK() {
		t.Fatalf("a copy that went back stays counted: %+v", got)
	}
	w.Look(map[Mailbox][]Copy{mb("x@h1"): {{ID: "a", State: "lost"}}})
	if n := len(w.WentBack()); n != 2 {
		t.Fatalf("an unknown state is not reported: %q", w.WentBack())
	}
}
