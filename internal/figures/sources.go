package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"golang.org/x/perf/benchfmt"
)

// sample is one measured value of one figure in one run.
type sample struct {
	Label, Unit string
	Value       float64
}

// source is one command (or a few) and the parser of its output.
type source struct {
	name  string
	title string
	backs string // where the figures are quoted
	// command is the command line shown in the report.
	command func(e *runEnv) string
	measure func(e *runEnv) ([]byte, error)
	parse   func(out []byte) ([]sample, error)
	// available says why the source cannot run on this tree ("" when it can).
	available func(e *runEnv) string
}

func goTest(args ...string) func(e *runEnv) ([]byte, error) {
	return func(e *runEnv) ([]byte, error) {
		return e.exec(context.Background(), e.goCmd, append([]string{"test"}, args...)...)
	}
}

func shown(args ...string) func(e *runEnv) string {
	return func(*runEnv) string { return "go test " + strings.Join(args, " ") }
}

var (
	pageArgs    = []string{"-run", "'^$'", "-bench", "'^BenchmarkPage100k$'", "-count=1", "./outbox"}
	mailboxArgs = []string{"-v", "-run", "'^$'", "-bench", "'^BenchmarkMailbox100k$'", "-count=1", "./host/mailstore"}
	splitArgs   = []string{"-run", "'^$'", "-bench", "'^(BenchmarkPushSplit|BenchmarkPullSplit|BenchmarkPushFloor)$'", "-count=1", "./relayserver"}
	abuseArgs   = []string{"-count=1", "-v", "-run", "'^TestAbuse'", "./relayserver/", "./lan/"}
	pacingArgs  = []string{"-count=1", "-v", "-run", "'^TestE2EPushPacingBurstAndStall$'", "./cmd/agentmbx"}
	notifyArgs  = []string{"-count=1", "-v", "-run", "'^TestE2EMCPSubscriptionWakesTheAgent$'", "./cmd/agentmbx"}
)

// unquote drops the shell quotes of the shown arguments for exec.
func unquote(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = strings.Trim(a, "'")
	}
	return out
}

var sources = []*source{
	{
		name:    "demo",
		title:   "The demo",
		backs:   "README \"Two commands\" (`make demo`)",
		command: func(*runEnv) string { return "agentmbx demo --json" },
		measure: func(e *runEnv) ([]byte, error) {
			return e.exec(context.Background(), e.bin, "demo", "--json")
		},
		parse: parseDemo,
	},
	{
		name:  "relay-bench",
		title: "Relay throughput",
		backs: "README \"Not built yet\", docs/relay.md \"Sizing a relay\"",
		command: func(*runEnv) string {
			return "agentmbx relay bench --json; agentmbx relay bench --batch 200 --json"
		},
		measure: func(e *runEnv) ([]byte, error) {
			one, err := e.exec(context.Background(), e.bin, "relay", "bench", "--json")
			if err != nil {
				return one, err
			}
			batch, err := e.exec(context.Background(), e.bin, "relay", "bench", "--batch", "200", "--json")
			return append(one, batch...), err
		},
		parse: parseRelayBench,
	},
	{
		name:    "relay-split",
		title:   "The relay's own share of the CPU (pushers and puller in a child process)",
		backs:   "README \"Not built yet\", docs/relay.md \"Sizing a relay\", docs/design.md \"Throughput\"",
		command: shown(splitArgs...),
		measure: goTest(unquote(splitArgs)...),
		parse:   parseSplit,
	},
	{
		name:    "outbox-page",
		title:   "Outbox pages",
		backs:   "docs/development.md \"Figures\"",
		command: shown(pageArgs...),
		measure: goTest(unquote(pageArgs)...),
		parse:   parsePage,
	},
	{
		name:    "mailbox",
		title:   "Search, threads and inbox pages on 100,000 messages",
		backs:   "docs/development.md \"Figures\"",
		command: shown(mailboxArgs...),
		measure: goTest(unquote(mailboxArgs)...),
		parse:   parseMailbox,
	},
	{
		name:    "abuse",
		title:   "Peak RSS under attack (`make abuse`)",
		backs:   "docs/security.md, docs/relay.md \"Sizing a relay\", docs/performance.md",
		command: shown(abuseArgs...),
		measure: goTest(unquote(abuseArgs)...),
		parse:   parseAbuse,
	},
	{
		name:    "pacing",
		title:   "Push pacing: 1,000 messages to two relay-only peers, the relay stopped 6 s",
		backs:   "docs/relay.md \"What hosts do with a relay\"",
		command: shown(pacingArgs...),
		measure: goTest(unquote(pacingArgs)...),
		parse:   parsePacing,
	},
	{
		name:    "mcp-notify",
		title:   "MCP: from mbx_send on one host to the resource notification on another",
		backs:   "README \"Woken by new mail\"",
		command: shown(notifyArgs...),
		measure: goTest(unquote(notifyArgs)...),
		parse:   parseNotify,
	},
	{
		name:  "recovery",
		title: "Recovery after an outage",
		backs: "docs/relay.md \"What hosts do with a relay\"",
		command: func(e *runEnv) string {
			return "go test -count=1 -v -run '^(" + strings.Join(recoveryTests(e), "|") + ")$' ./cmd/agentmbx"
		},
		measure: func(e *runEnv) ([]byte, error) {
			return e.exec(context.Background(), e.goCmd, "test", "-count=1", "-v",
				"-run", "^("+strings.Join(recoveryTests(e), "|")+")$", "./cmd/agentmbx")
		},
		parse: parseRecovery,
		available: func(e *runEnv) string {
			if len(recoveryTests(e)) == 0 {
				return "no test named TestE2ERecovery… in ./cmd/agentmbx on this tree"
			}
			return ""
		},
	},
}

// recoveryTests lists the measuring recovery tests of ./cmd/agentmbx (none when the list fails).
func recoveryTests(e *runEnv) []string {
	out, err := e.exec(context.Background(), e.goCmd, "test", "-list", "^TestE2ERecovery", "./cmd/agentmbx")
	if err != nil {
		return nil
	}
	var names []string
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "TestE2ERecovery") {
			names = append(names, strings.TrimSpace(line))
		}
	}
	return names
}

// jsonObjects decodes every JSON object of out that starts a line (one line or indented over
// many) into a new T; lines between them (narration, logs) are skipped.
func jsonObjects[T any](out []byte) []T {
	var all []T
	for i := 0; i < len(out); {
		if out[i] == '{' && (i == 0 || out[i-1] == '\n') {
			var v T
			d := json.NewDecoder(bytes.NewReader(out[i:]))
			if d.Decode(&v) == nil {
				all = append(all, v)
				i += int(d.InputOffset())
				continue
			}
		}
		i++
	}
	return all
}

func parseDemo(out []byte) ([]sample, error) {
	type result struct {
		Sent, Delivered, Lost, Duplicated int
		WentBack                          int `json:"went_back"`
		OK                                bool
		Seconds                           float64
	}
	rs := jsonObjects[result](out)
	if len(rs) != 1 || rs[0].Sent == 0 {
		return nil, fmt.Errorf("want one JSON result of the demo, found %d", len(rs))
	}
	r := rs[0]
	if !r.OK {
		return nil, fmt.Errorf("the demo failed: %+v", r)
	}
	return []sample{
		{"the whole demo (wall time)", "s", r.Seconds},
		{"messages sent and delivered", "", float64(r.Delivered)},
	}, nil
}

func parseRelayBench(out []byte) ([]sample, error) {
	type result struct {
		Batch                     int     `json:"batch"`
		Pushers                   int     `json:"pushers"`
		ItemsPerS                 float64 `json:"items_per_s"`
		CPUUsPerItem              float64 `json:"cpu_us_per_item"`
		UnitsPerCommit            float64 `json:"units_per_commit"`
		DiskBytesPerItem          float64 `json:"disk_bytes_per_item"`
		CommitPerItemItemsPerS    float64 `json:"commit_per_item_items_per_s"`
		CommitPerItemCPUUsPerItem float64 `json:"commit_per_item_cpu_us_per_item"`
		FsyncPerS                 float64 `json:"fsync_per_s"`
		Ed25519SignUs             float64 `json:"ed25519_sign_us"`
		Ed25519VerifyUs           float64 `json:"ed25519_verify_us"`
		FloorRatio                float64 `json:"floor_ratio"`
	}
	rs := jsonObjects[result](out)
	if len(rs) != 2 || rs[0].Batch != 1 || rs[1].Batch != 200 {
		return nil, fmt.Errorf("want the JSON results of a 1-item and a 200-item run, found %d", len(rs))
	}
	var s []sample
	for _, r := range rs {
		what := fmt.Sprintf("%d-item batches, %d pushers", r.Batch, r.Pushers)
		if r.Batch == 1 {
			what = fmt.Sprintf("1-item pushes, %d pushers", r.Pushers)
		}
		if r.ItemsPerS <= 0 || r.CPUUsPerItem <= 0 || r.FloorRatio <= 0 {
			return nil, fmt.Errorf("%s: a zero figure in %+v", what, r)
		}
		s = append(s,
			sample{what + ": items/s (group commit)", "items/s", r.ItemsPerS},
			sample{what + ": CPU per item (whole process)", "µs", r.CPUUsPerItem},
			sample{what + ": CPU per item ÷ the Ed25519 floor", "×", r.FloorRatio},
			sample{what + ": pushes per commit", "", r.UnitsPerCommit},
			sample{what + ": items/s with one commit per push", "items/s", r.CommitPerItemItemsPerS},
			sample{what + ": bytes on disk per item", "B", r.DiskBytesPerItem},
		)
	}
	s = append(s,
		sample{"Ed25519 sign", "µs", rs[0].Ed25519SignUs},
		sample{"Ed25519 verify", "µs", rs[0].Ed25519VerifyUs},
		sample{"raw fsync/s of the directory", "/s", rs[0].FsyncPerS},
	)
	return s, nil
}

// benchResults parses go test -bench output with benchfmt: benchmark name (without "Benchmark"
// and the -GOMAXPROCS suffix) → unit → value, time per op in seconds ("sec/op").
func benchResults(out []byte) (map[string]map[string]float64, []string, error) {
	r := benchfmt.NewReader(bytes.NewReader(out), "go test -bench")
	res := map[string]map[string]float64{}
	var order []string
	for r.Scan() {
		b, ok := r.Result().(*benchfmt.Result)
		if !ok {
			continue // a syntax error (a benchmark's name line before its logs), a unit line
		}
		base, parts := b.Name.Parts()
		name := string(base)
		for _, p := range parts {
			if p[0] == '/' {
				name += string(p)
			}
		}
		if res[name] == nil {
			res[name] = map[string]float64{}
			order = append(order, name)
		}
		for _, v := range b.Values {
			res[name][v.Unit] = v.Value
		}
	}
	if err := r.Err(); err != nil {
		return nil, nil, err
	}
	if len(res) == 0 {
		return nil, nil, fmt.Errorf("no benchmark result in the output")
	}
	return res, order, nil
}

// need returns the value of unit in the result of name, or an error naming what is missing.
func need(res map[string]map[string]float64, name, unit string) (float64, error) {
	v, ok := res[name][unit]
	if !ok {
		return 0, fmt.Errorf("no %s for benchmark %s", unit, name)
	}
	return v, nil
}

func parseSplit(out []byte) ([]sample, error) {
	res, _, err := benchResults(out)
	if err != nil {
		return nil, err
	}
	var s []sample
	for _, c := range []struct{ name, label, unit string }{
		{"PushSplit/batch=1", "1-item pushes (64 pushers): relay CPU per item", "relay-cpu-µs/item"},
		{"PushSplit/batch=1", "1-item pushes (64 pushers): pushers' CPU per item", "pusher-cpu-µs/item"},
		{"PushSplit/batch=1", "1-item pushes (64 pushers): pushes per commit", "units/commit"},
		{"PushSplit/batch=200", "200-item batches (4 pushers): relay CPU per item", "relay-cpu-µs/item"},
		{"PushSplit/batch=200", "200-item batches (4 pushers): pushers' CPU per item", "pusher-cpu-µs/item"},
		{"PullSplit", "500-item pull pages: relay CPU per item", "relay-cpu-µs/item"},
		{"PushFloor/batch=1", "store-less floor server, 1-item pushes: its CPU per item", "relay-cpu-µs/item"},
		{"PushFloor/batch=1", "store-less floor server, 1-item pushes: with its pushers", "cpu-µs/item"},
		{"PushFloor/batch=1", "store-less floor server, 1-item pushes: ÷ the Ed25519 floor", "floor-ratio"},
		{"PushFloor/batch=200", "store-less floor server, 200-item batches: ÷ the Ed25519 floor", "floor-ratio"},
	} {
		v, err := need(res, c.name, c.unit)
		if err != nil {
			return nil, err
		}
		unit := "µs"
		if c.unit == "floor-ratio" {
			unit = "×"
		} else if c.unit == "units/commit" {
			unit = ""
		}
		s = append(s, sample{c.label, unit, v})
	}
	return s, nil
}

func parsePage(out []byte) ([]sample, error) {
	res, _, err := benchResults(out)
	if err != nil {
		return nil, err
	}
	page, err := need(res, "Page100k/page", "sec/op")
	if err != nil {
		return nil, err
	}
	all, err := need(res, "Page100k/list-all", "sec/op")
	if err != nil {
		return nil, err
	}
	return []sample{
		{"the default page (newest 50 pending of 100,000 rows)", "ms", page * 1e3},
		{"every row read (the listing before the index)", "ms", all * 1e3},
		{"every row ÷ the page", "×", all / page},
	}, nil
}

var stateSize = regexp.MustCompile(`generated (\d+) messages in \S+; state\.db (\d+) MiB`)

func parseMailbox(out []byte) ([]sample, error) {
	res, order, err := benchResults(out)
	if err != nil {
		return nil, err
	}
	var s []sample
	for _, name := range order {
		sub, ok := strings.CutPrefix(name, "Mailbox100k/")
		if !ok {
			continue
		}
		v, err := need(res, name, "sec/op")
		if err != nil {
			return nil, err
		}
		s = append(s, sample{sub, "ms", v * 1e3})
	}
	if len(s) == 0 {
		return nil, fmt.Errorf("no Mailbox100k sub-benchmark in the output")
	}
	m := stateSize.FindSubmatch(out)
	if m == nil {
		return nil, fmt.Errorf("no 'generated N messages …; state.db N MiB' line in the output")
	}
	mib, _ := strconv.ParseFloat(string(m[2]), 64)
	return append(s, sample{"state.db with " + commas(mustAtoi(m[1])) + " messages and their indexes", "MiB", mib}), nil
}

func mustAtoi(b []byte) int64 {
	n, _ := strconv.ParseInt(string(b), 10, 64)
	return n
}

var (
	abuseLine = regexp.MustCompile(`abuse: (.*)`)
	peakRSS   = regexp.MustCompile(`peak RSS(?: so far)? (\d+) MB`)
	storeGrew = regexp.MustCompile(`store grew ([0-9.]+) MB`)
	inDur     = regexp.MustCompile(` in [0-9.]+[a-zµ]+$`)
)

// parseAbuse reads the "abuse: WHO, WHAT: answers …; peak RSS N MB" lines of the TestAbuse tests
// (and "store grew N MB" where a line has it).
func parseAbuse(out []byte) ([]sample, error) {
	var s []sample
	for _, line := range strings.Split(string(out), "\n") {
		m := abuseLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		label, _, _ := strings.Cut(m[1], ": ")
		label = inDur.ReplaceAllString(label, "")
		p, g := peakRSS.FindStringSubmatch(m[1]), storeGrew.FindStringSubmatch(m[1])
		if p == nil && g == nil {
			return nil, fmt.Errorf("no peak RSS and no store growth in %q", line)
		}
		if g != nil {
			v, _ := strconv.ParseFloat(g[1], 64)
			s = append(s, sample{label + ": the store grew", "MB", v})
		}
		if p != nil {
			v, _ := strconv.ParseFloat(p[1], 64)
			if strings.Contains(p[0], "so far") {
				label += " (the process's peak so far)"
			}
			s = append(s, sample{label, "MB", v})
		}
	}
	if len(s) == 0 {
		return nil, fmt.Errorf("no 'abuse:' line in the output")
	}
	return s, nil
}

var (
	pacingSent    = regexp.MustCompile(`pacing: (\d+) messages sent in (\S+) \(relay stopped`)
	pacingSettled = regexp.MustCompile(`pacing: settled (\S+) after the last send; (\d+) push requests .*?; (\d+) items refused rejected:rate in (\d+) refused requests; most attempts of a row (\d+)`)
)

func parsePacing(out []byte) ([]sample, error) {
	a := pacingSent.FindSubmatch(out)
	b := pacingSettled.FindSubmatch(out)
	if a == nil || b == nil {
		return nil, fmt.Errorf("no 'pacing: … sent in' and 'pacing: settled …' lines in the output")
	}
	sent, err := time.ParseDuration(string(a[2]))
	if err != nil {
		return nil, err
	}
	settled, err := time.ParseDuration(string(b[1]))
	if err != nil {
		return nil, err
	}
	num := func(x []byte) float64 { v, _ := strconv.ParseFloat(string(x), 64); return v }
	return []sample{
		{"push requests (all hosts, receipts included) for 2,000 envelope rows", "", num(b[2])},
		{"requests refused for the rate", "", num(b[4])},
		{"items refused for the rate", "", num(b[3])},
		{"most attempts of a row", "", num(b[5])},
		{"the 1,000 sends (wall time, stall included)", "s", sent.Seconds()},
		{"settled after the last send", "s", settled.Seconds()},
	}, nil
}

var notifyLine = regexp.MustCompile(`send → notification over loopback, (\d+) sends: median (\S+), min (\S+), max (\S+)`)

func parseNotify(out []byte) ([]sample, error) {
	m := notifyLine.FindSubmatch(out)
	if m == nil {
		return nil, fmt.Errorf("no 'send → notification over loopback, N sends: median …' line in the output")
	}
	var s []sample
	for i, what := range []string{"median", "fastest", "slowest"} {
		d, err := time.ParseDuration(string(m[2+i]))
		if err != nil {
			return nil, err
		}
		s = append(s, sample{fmt.Sprintf("%s of %s sends", what, m[1]), "ms", float64(d) / float64(time.Millisecond)})
	}
	return s, nil
}

var recoveryLine = regexp.MustCompile(`recovery: all (\d+) waiting rows delivered and receipted (\S+) after`)

func parseRecovery(out []byte) ([]sample, error) {
	ms := recoveryLine.FindAllSubmatch(out, -1)
	if len(ms) == 0 {
		return nil, fmt.Errorf("no 'recovery: all N waiting rows delivered and receipted D after' line in the output")
	}
	var s []sample
	for _, m := range ms {
		d, err := time.ParseDuration(string(m[2]))
		if err != nil {
			return nil, err
		}
		s = append(s, sample{"all " + string(m[1]) + " waiting rows delivered and receipted, after the relay and the peer came back", "s", d.Seconds()})
	}
	return s, nil
}
