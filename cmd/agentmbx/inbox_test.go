package main

import "testing"

func TestVisibleControls(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"plain text\nline two\tTab", "plain text\nline two\tTab"},
		{"\x1b[2J\x1b]0;owned\x07", `\x1b[2J\x1b]0;owned\x07`},
		{"over\rwrite", `over\x0dwrite`},
		{"del\x7f c1\u0085 é ✓", `del\x7f c1\x85 é ✓`},
	} {
		if got := visibleControls(tt.in); got != tt.want {
			t.Errorf("visibleControls(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
