package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/demo"
	"github.com/agentmbx/agentmbx/relayserver/relaybench"
)

func samplesByLabel(t *testing.T, s []sample) map[string]sample {
	t.Helper()
	m := map[string]sample{}
	for _, x := range s {
		if _, dup := m[x.Label]; dup {
			t.Errorf("label %q twice in one run", x.Label)
		}
		m[x.Label] = x
	}
	return m
}

// TestParsers: each parser on sample output of its command (testdata, in the format the
// benchmarks and tests print) finds every figure with the right value and unit.
func TestParsers(t *testing.T) {
	for _, c := range []struct {
		file  string
		parse func([]byte) ([]sample, error)
		n     int
		want  map[string]sample
	}{
		{"bench-page.txt", parsePage, 3, map[string]sample{
			"the default page (newest 50 pending of 100,000 rows)": {Unit: "ms", Value: 12.345678},
			"every row read (the listing before the index)":        {Unit: "ms", Value: 1100},
		}},
		{"bench-mailbox.txt", parseMailbox, 9, map[string]sample{
			"search/rare-word":            {Unit: "ms", Value: 0.21},
			"search/disjoint-words-worst": {Unit: "ms", Value: 120},
			"thread":                      {Unit: "ms", Value: 0.1},
			"inbox-page-all":              {Unit: "ms", Value: 17},
			"state.db with 100,000 messages and their indexes": {Unit: "MiB", Value: 376},
		}},
		{"bench-split.txt", parseSplit, 10, map[string]sample{
			"1-item pushes (64 pushers): relay CPU per item":                 {Unit: "µs", Value: 202},
			"1-item pushes (64 pushers): pushes per commit":                  {Unit: "", Value: 14.1},
			"200-item batches (4 pushers): relay CPU per item":               {Unit: "µs", Value: 43},
			"500-item pull pages: relay CPU per item":                        {Unit: "µs", Value: 1.9},
			"store-less floor server, 1-item pushes: ÷ the Ed25519 floor":    {Unit: "×", Value: 2.318},
			"store-less floor server, 1-item pushes: with its pushers":       {Unit: "µs", Value: 204},
			"store-less floor server, 200-item batches: ÷ the Ed25519 floor": {Unit: "×", Value: 2},
		}},
		{"abuse.txt", parseAbuse, 8, map[string]sample{
			"relay, one key pushes 12,000 envelopes to itself and acks them: the store grew":                                {Unit: "MB", Value: 5.3},
			"relay, 100 keys each push 600 envelopes to themselves and ack them (cap 400 dedup rows a key)":                 {Unit: "MB", Value: 41},
			"relay, 100 keys each push 600 envelopes to themselves and ack them (cap 400 dedup rows a key): the store grew": {Unit: "MB", Value: 8.6},
			"relay, 40 slow pulls of the largest page from one key (20 MiB queue)":                                          {Unit: "MB", Value: 128},
			"relay, wave 2 (the process's peak so far)":                                                                     {Unit: "MB", Value: 119},
			"relay, 12,000 challenges from 400 /64s of one /56":                                                             {Unit: "MB", Value: 36},
			"LAN, 300 connections naming a paired peer with 1 MiB bodies":                                                   {Unit: "MB", Value: 43},
		}},
		{"pacing.txt", parsePacing, 6, map[string]sample{
			"push requests (all hosts, receipts included) for 2,000 envelope rows": {Value: 66},
			"requests refused for the rate":                                        {Value: 0},
			"most attempts of a row":                                               {Value: 2},
			"settled after the last send":                                          {Unit: "s", Value: 5.678},
			"the 1,000 sends (wall time, stall included)":                          {Unit: "s", Value: 41.234},
		}},
		{"notify.txt", parseNotify, 3, map[string]sample{
			"median of 20 sends":  {Unit: "ms", Value: 28.5},
			"fastest of 20 sends": {Unit: "ms", Value: 0.9},
			"slowest of 20 sends": {Unit: "ms", Value: 1500},
		}},
		{"recovery.txt", parseRecovery, 1, map[string]sample{
			"all 20 waiting rows delivered and receipted, after the relay and the peer came back": {Unit: "s", Value: 9.9},
		}},
	} {
		t.Run(c.file, func(t *testing.T) {
			out, err := os.ReadFile(filepath.Join("testdata", c.file))
			if err != nil {
				t.Fatal(err)
			}
			s, err := c.parse(out)
			if err != nil {
				t.Fatal(err)
			}
			if len(s) != c.n {
				t.Errorf("%d figures, want %d: %+v", len(s), c.n, s)
			}
			got := samplesByLabel(t, s)
			for label, w := range c.want {
				g, ok := got[label]
				if !ok {
					t.Errorf("no figure %q in %+v", label, s)
					continue
				}
				if g.Unit != w.Unit || !near(g.Value, w.Value) {
					t.Errorf("%q = %v %q, want %v %q", label, g.Value, g.Unit, w.Value, w.Unit)
				}
			}
			// Output with the figure lines cut off is refused, not read as zeros.
			if s, err := c.parse(out[:len(out)/4]); err == nil && len(s) == c.n {
				t.Errorf("a quarter of the output parsed as a whole run: %+v", s)
			}
			if _, err := c.parse([]byte("PASS\nok  \tgithub.com/agentmbx/agentmbx/x\t1.0s\n")); err == nil {
				t.Errorf("output without figures parsed")
			}
		})
	}
}

func near(a, b float64) bool { return a-b < 1e-6*max(1, b) && b-a < 1e-6*max(1, b) }

// TestParseJSONSources: the demo's and relay bench's JSON, made from their own result types (so a
// renamed field fails here), with narration around it as the commands print.
func TestParseJSONSources(t *testing.T) {
	d, _ := json.MarshalIndent(demo.Result{Sent: 24, Delivered: 24, OK: true, Seconds: 12.5}, "", "  ")
	s, err := parseDemo([]byte("  doctor: 18 ok, 0 warn\n{ not json\n" + string(d) + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	if m := samplesByLabel(t, s); m["the whole demo (wall time)"].Value != 12.5 || m["messages sent and delivered"].Value != 24 {
		t.Errorf("demo: %+v", s)
	}
	bad, _ := json.Marshal(demo.Result{Sent: 24, Delivered: 23, Lost: 1, Seconds: 9})
	if _, err := parseDemo(bad); err == nil {
		t.Errorf("a failed demo gave figures")
	}

	one, _ := json.Marshal(relaybench.Result{Pushers: 64, Batch: 1, ItemsPerS: 5280, CPUUsPerItem: 276,
		UnitsPerCommit: 14, DiskBytesPerItem: 390, CommitPerItemItemsPerS: 900, FsyncPerS: 400,
		Ed25519SignUs: 19.5, Ed25519VerifyUs: 42, FloorRatio: 3.5})
	batch, _ := json.Marshal(relaybench.Result{Pushers: 64, Batch: 200, ItemsPerS: 40000, CPUUsPerItem: 46,
		UnitsPerCommit: 8, DiskBytesPerItem: 385, CommitPerItemItemsPerS: 30000, FsyncPerS: 410,
		Ed25519SignUs: 20, Ed25519VerifyUs: 43, FloorRatio: 2.4})
	s, err = parseRelayBench([]byte(string(one) + "\n" + string(batch) + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	m := samplesByLabel(t, s)
	for label, want := range map[string]float64{
		"1-item pushes, 64 pushers: items/s (group commit)":              5280,
		"1-item pushes, 64 pushers: CPU per item ÷ the Ed25519 floor":    3.5,
		"200-item batches, 64 pushers: CPU per item (whole process)":     46,
		"200-item batches, 64 pushers: items/s with one commit per push": 30000,
		"Ed25519 verify": 42,
		"1-item pushes, 64 pushers: bytes on disk per item": 390,
	} {
		if m[label].Value != want {
			t.Errorf("%q = %v, want %v", label, m[label].Value, want)
		}
	}
	if _, err := parseRelayBench(one); err == nil {
		t.Errorf("one run of the two parsed")
	}
}

// TestLogLinesStillPrinted: the tests whose log lines the parsers read still print them in the
// form the parsers expect; a changed line fails here, not at the next `make figures`.
func TestLogLinesStillPrinted(t *testing.T) {
	for file, phrases := range map[string][]string{
		"../../host/mailstore/bench_test.go":           {`"generated %d messages in %s; state.db %d MiB"`},
		"../../cmd/agentmbx/pacing_e2e_test.go":        {`"pacing: %d messages sent in %v (relay stopped`, `"pacing: settled %v after the last send; %d push requests `, `; %d items refused rejected:rate in %d refused requests; most attempts of a row %d"`},
		"../../relayserver/abuse_pull_test.go":         {`"abuse: relay, `, `peak RSS %d MB`},
		"../../relayserver/abuse_rss_test.go":          {`"abuse: relay, `, `peak RSS %d MB`},
		"../../relayserver/abuse_push_rss_test.go":     {`"abuse: relay, `, `peak RSS so far %d MB`, `peak RSS %d MB`},
		"../../cmd/agentmbx/mcp_subscribe_e2e_test.go": {`"send → notification over loopback, 20 sends: median %v, min %v, max %v"`},
		"../../relayserver/abuse_tombstone_test.go":    {`"abuse: relay, `, `store grew %.1f MB`, `peak RSS %d MB"`},
		"../../lan/abuse_rss_test.go":                  {`"abuse: LAN, `, `peak RSS %d MB`},
		"../../relayserver/bench_split_test.go":        {`"relay-cpu-µs/item"`, `"pusher-cpu-µs/item"`, `"units/commit"`, `"batch=%d"`},
		"../../relayserver/bench_floor_test.go":        {`"floor-ratio"`, `"cpu-µs/item"`},
	} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range phrases {
			if !strings.Contains(string(b), p) {
				t.Errorf("%s no longer prints %s: update the parser in internal/figures", file, p)
			}
		}
	}
	// The recovery test is optional (the source runs when one exists); when it does, its line.
	b, err := os.ReadFile("../../cmd/agentmbx/pacing_e2e_test.go")
	if err == nil && strings.Contains(string(b), "func TestE2ERecovery") &&
		!strings.Contains(string(b), `"recovery: all %d waiting rows delivered and receipted %v after`) {
		t.Errorf("the recovery test no longer prints the line parseRecovery reads")
	}
}

func TestRender(t *testing.T) {
	r := &sourceResult{src: &source{title: "Relay throughput", backs: "README"}, cmd: "agentmbx relay bench --json"}
	r.add([]sample{{"items/s", "items/s", 5280}, {"ratio", "×", 3.5}, {"requests", "", 66}})
	r.add([]sample{{"items/s", "items/s", 5950.4}, {"ratio", "×", 3.5}, {"requests", "", 162}})
	r.failures = []string{"run 3: exit status 1\nFAIL x"}
	absent := &sourceResult{src: &source{title: "Recovery", backs: "docs"}, cmd: "go test", absent: "no test"}
	rep := &report{Runs: 3, Started: time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC), Took: time.Minute,
		Machine: "AMD EPYC, 2 cores", LoadStart: "1.20", LoadEnd: "2.00", Results: []*sourceResult{r, absent}}
	out := rep.render()
	for _, want := range []string{
		"- Date: 2026-12-05 09:00 UTC (1m0s in all)",
		"- Machine: AMD EPYC, 2 cores",
		"- Load average (1 minute): 1.20 at the start, 2.00 at the end",
		"## Relay throughput\n\n`agentmbx relay bench --json`",
		"| items/s | 5,280–5,950 | items/s | 2 |",
		"| ratio | 3.50 | × | 2 |",
		"| requests | 66–162 |  | 2 |",
		"Failed, run 3: exit status 1\n\n```text\nFAIL x\n```",
		"Not measured: no test.",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("render lacks %q:\n%s", want, out)
		}
	}
}

func TestFmtNum(t *testing.T) {
	for v, want := range map[float64]string{
		0: "0", 2: "2", 66: "66", 5280.4: "5,280", 1234567: "1,234,567", 202.4: "202", 14.06: "14.1",
		3.456: "3.46", 0.21: "0.210", 0.0123: "0.0123", -1500: "-1,500",
	} {
		if got := fmtNum(v); got != want {
			t.Errorf("fmtNum(%v) = %q, want %q", v, got, want)
		}
	}
	if got := valueRange([]float64{16, 28.2}); got != "16.0–28.2" {
		t.Errorf("valueRange(16, 28.2) = %q, want 16.0–28.2", got)
	}
	if got := valueRange([]float64{60, 73}); got != "60–73" {
		t.Errorf("valueRange(60, 73) = %q, want 60–73", got)
	}
	if got := cpuModel("processor\t: 0\nmodel name\t: AMD EPYC 7B13\n", "amd64"); got != "AMD EPYC 7B13" {
		t.Errorf("cpuModel = %q", got)
	}
}
