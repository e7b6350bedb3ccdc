package shellquote

import (
	"os/exec"
	"testing"
)

func TestQuoteRoundTripsThroughAShell(t *testing.T) {
	words := []string{"plain", "./a/b", "with space", "it's", `back\slash`, "$HOME", "a;b", "*", "", "--home=x", "ünï"}
	for _, w := range words {
		out, err := exec.Command("sh", "-c", "printf %s "+Quote(w)).Output()
		if err != nil {
			t.Fatalf("sh: %v", err)
		}
		if string(out) != w {
			t.Errorf("Quote(%q) = %s: the shell read %q", w, Quote(w), out)
		}
	}
	if got, want := Join("agentmbx", "daemon", "--home", "my home"), "agentmbx daemon --home 'my home'"; got != want {
		t.Errorf("Join = %q, want %q", got, want)
	}
}
