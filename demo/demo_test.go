package demo

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
)

func TestScore(t *testing.T) {
	tests := []struct {
		name   string
		ids    []string
		copies map[string]int
		want   string
		ok     bool
	}{
		{"all once", []string{"a", "b"}, map[string]int{"a": 1, "b": 1}, "demo: sent=2 delivered=2 lost=0 duplicated=0", true},
		{"one lost", []string{"a", "b"}, map[string]int{"a": 1}, "demo: sent=2 delivered=1 lost=1 duplicated=0", false},
		{"one twice", []string{"a", "b"}, map[string]int{"a": 1, "b": 2}, "demo: sent=2 delivered=2 lost=0 duplicated=1", false},
		{"nothing sent", nil, nil, "demo: sent=0 delivered=0 lost=0 duplicated=0", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := score(tt.ids, tt.copies)
			if r.Line() != tt.want || r.OK != tt.ok {
				t.Fatalf("score = %q ok %v, want %q ok %v", r.Line(), r.OK, tt.want, tt.ok)
			}
		})
	}
}

// A step that fails ends the demo with an error naming it, a result that is not OK, and no
// directory left behind.
func TestFailedStep(t *testing.T) {
	var out bytes.Buffer
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	res, err := Run(context.Background(), Config{Bin: "/bin/false", Out: &out})
	if err == nil || res.OK || !strings.Contains(err.Error(), "step 1") || !strings.Contains(res.Failed, "relay keygen") {
		t.Fatalf("Run with a failing binary = %+v, %v", res, err)
	}
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Errorf("left %v behind", left)
	}
}
