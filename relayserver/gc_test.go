package relayserver_test

import (
	"runtime/debug"
	"testing"

	"github.com/agentmbx/agentmbx/relayserver"
)

func TestTuneGC(t *testing.T) {
	old := debug.SetGCPercent(100)
	defer debug.SetGCPercent(old)
	env := map[string]string{}
	getenv := func(k string) string { return env[k] }

	if got := relayserver.TuneGC(getenv); got != relayserver.GCPercent {
		t.Fatalf("TuneGC without GOGC = %d, want %d", got, relayserver.GCPercent)
	}
	if p := debug.SetGCPercent(100); p != relayserver.GCPercent {
		t.Fatalf("GOGC in effect = %d, want %d", p, relayserver.GCPercent)
	}

	// The operator's GOGC (applied by the runtime at start; 150 stands in for it) is kept.
	debug.SetGCPercent(150)
	env["GOGC"] = "150"
	if got := relayserver.TuneGC(getenv); got != 150 {
		t.Fatalf("TuneGC with GOGC=150 = %d, want 150", got)
	}
	if p := debug.SetGCPercent(100); p != 150 {
		t.Fatalf("GOGC in effect = %d, want the operator's 150", p)
	}
}
