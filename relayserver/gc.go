package relayserver

import "runtime/debug"

// GCPercent is the garbage collector's target (GOGC) for a relay process when the environment
// does not set GOGC. A relay keeps little in memory between requests (queues live in the store,
// request bodies are capped and budgeted), so most of its heap is garbage from requests, and at
// Go's default of 100 the collector ran often enough to cost 5–13% of the relay's CPU per pushed
// item in BenchmarkPushSplit. At 400 the heap may grow to five times what is live instead of
// twice; the peak RSS of `make abuse` (200 connections holding 8 MiB bodies) stayed at 83 MB.
const GCPercent = 400

// TuneGC sets the garbage collector of a relay process: GOGC=GCPercent unless getenv("GOGC")
// is set (the operator's value, which the Go runtime already applied, wins). GOMEMLIMIT, when
// set, is applied by the runtime as usual. It reports the GOGC now in effect.
func TuneGC(getenv func(string) string) int {
	if getenv("GOGC") != "" {
		p := debug.SetGCPercent(100)
		debug.SetGCPercent(p)
		return p
	}
	debug.SetGCPercent(GCPercent)
	return GCPercent
}
