package demo

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	"github.com/agentmbx/agentmbx/internal/oracle"
)

func TestResultOf(t *testing.T) {
	tests := []struct {
		name  string
		tally oracle.Tally
		want  string
		ok    bool
	}{
		{"all once", oracle.Tally{Messages: 2, Delivered: 2}, "demo: sent=2 delivered=2 lost=0 duplicated=0 went_back=0", true},
		{"one lost", oracle.Tally{Messages: 2, Delivered: 1, Lost: 1}, "demo: sent=2 delivered=1 lost=1 duplicated=0 went_back=0", false},
		{"one twice", oracle.Tally{Messages: 2, Delivered: 1, Duplicated: 1}, "demo: sent=2 delivered=1 lost=0 duplicated=1 went_back=0", false},
		{"one back to unread", oracle.Tally{Messages: 2, Delivered: 2, WentBack: 1}, "demo: sent=2 delivered=2 lost=0 duplicated=0 went_back=1", false},
		{"nothing sent", oracle.Tally{}, "demo: sent=0 delivered=0 lost=0 duplicated=0 went_back=0", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := resultOf(tt.tally)
			if r.Line() != tt.want || r.OK != tt.ok {
				t.Fatalf("resultOf = %q ok %v, want %q ok %v", r.Line(), r.OK, tt.want, tt.ok)
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
