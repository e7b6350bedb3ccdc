// Package demo runs `agentmbx demo`: on this machine, in a temporary directory, a relay and two
// hosts "home" and "work" with no LAN route between them, driven through the real agentmbx
// binary as child processes (the code paths a user runs). The hosts pair by card, pin the relay
// key with --key and send mail both ways; the relay is SIGKILLed while mail is on its way and
// restarted; a restore drill backs the relay up with mail waiting in it, lets that mail be
// delivered and more reach the relay, restores the backup under a new epoch, and has the hosts
// re-push what the relay lost and re-pull what it had (delivered again, and kept once). The
// mailboxes are shown, doctor runs on both hosts, and the demo ends with one line:
//
//	demo: sent=N delivered=N lost=0 duplicated=0 went_back=0
//
// The count is package oracle's: deliveries, not mailbox rows (a copy's delivery count), and a
// copy an agent read must never be seen unread again.
//
// Everything listens on 127.0.0.1 only. The directory is removed at the end unless Keep.
package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/internal/oracle"
)

// Config is one demo run.
type Config struct {
	// Bin is the agentmbx binary the children run.
	Bin string
	// Keep leaves the directory, and stops nothing it cannot leave running (every child is
	// stopped either way).
	Keep bool
	// Out receives the demo's narration (what each step did, the mailboxes, doctor).
	Out io.Writer
	// PerStep is how many messages each direction sends in each mail step (default 3).
	PerStep int
	// Timeout bounds the whole run (default 2 minutes).
	Timeout time.Duration
	// DaemonEnv is added to the host daemons' environment: the oracle's self-test turns the
	// receiver's dedup off there (a failpoint in MBX_FAILPOINT).
	DaemonEnv []string
}

// Result is what the demo proved. OK is false when a message was lost or duplicated, a copy went
// back to an earlier state, or a step failed (Failed names it).
type Result struct {
	Sent       int `json:"sent"`
	Delivered  int `json:"delivered"`
	Lost       int `json:"lost"`
	Duplicated int `json:"duplicated"`
	// WentBack counts the copies seen in an earlier state than before (read, then unread).
	WentBack int     `json:"went_back"`
	OK       bool    `json:"ok"`
	Failed   string  `json:"failed,omitempty"`
	Seconds  float64 `json:"seconds"`
	Dir      string  `json:"dir,omitempty"` // with Keep
}

// Line is the summary line.
func (r Result) Line() string {
	return fmt.Sprintf("demo: sent=%d delivered=%d lost=%d duplicated=%d went_back=%d", r.Sent, r.Delivered, r.Lost, r.Duplicated, r.WentBack)
}

// run is the state of one demo.
type run struct {
	cfg   Config
	dir   string
	procs []*proc
	out   io.Writer

	seed     string // the relay key (MBX_RELAY_KEY)
	fp       string // its fingerprint
	relayDir string
	relayURL string
	relay    *proc
	hosts    map[string]*hostProc
	// sent is every message sent, with the mailbox it must reach, once; ids holds their ids.
	sent []oracle.Sent
	ids  map[string]bool
	// watch sees every copy's state at each look, and the reads the demo made.
	watch oracle.Watch
	// problems are the oracle's problems at the last tally.
	problems []string
}

// hostProc is one host: its home and its daemon.
type hostProc struct {
	name, home, agent string
	addr              string // the daemon's LAN address (never given to the peer)
	daemon            *proc
}

// Run runs the demo and returns what it proved. The error is the failed step (also in
// Result.Failed); the Result is filled as far as the demo got.
func Run(ctx context.Context, cfg Config) (res Result, err error) {
	if cfg.Bin == "" {
		return Result{}, errors.New("demo: no agentmbx binary")
	}
	if cfg.Out == nil {
		cfg.Out = io.Discard
	}
	if cfg.PerStep <= 0 {
		cfg.PerStep = 3
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 2 * time.Minute
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	// A short path: the control socket's path must stay under about 100 bytes.
	dir, err := os.MkdirTemp("", "mbxdemo")
	if err != nil {
		return Result{}, fmt.Errorf("demo: %w", err)
	}
	d := &run{cfg: cfg, dir: dir, out: cfg.Out, hosts: map[string]*hostProc{}, ids: map[string]bool{}}
	defer func() {
		for _, p := range d.procs {
			p.kill()
		}
		if cfg.Keep {
			d.writeLogs()
			res.Dir = dir
			d.say("kept %s (relay store, both host homes, logs in *.log)", dir)
		} else {
			os.RemoveAll(dir)
		}
		res.Seconds = time.Since(start).Seconds()
	}()
	err = d.steps(ctx)
	res = d.tally(ctx)
	if err != nil {
		res.OK, res.Failed = false, err.Error()
		d.dumpLogs()
		return res, err
	}
	if !res.OK {
		res.Failed = "mail was lost or duplicated, or went back to unread"
		for _, p := range d.problems {
			d.say("  %s", p)
		}
		return res, errors.New("demo: " + res.Failed)
	}
	return res, nil
}

// steps is the story the demo tells.
func (d *run) steps(ctx context.Context) error {
	steps := []struct {
		name string
		fn   func(context.Context) error
	}{
		{"start a relay with a key from relay keygen", d.startRelay},
		{"create hosts home and work, pair them by card (no LAN route)", d.createHosts},
		{"pin the relay with --key and start both daemons", d.pinAndStart},
		{"send mail both ways through the relay", d.mailBothWays},
		{"SIGKILL the relay with mail in flight, restart it", d.killRelay},
		{"restore drill: backup with mail waiting, more mail, restore, new epoch, re-push and re-pull", d.restoreDrill},
		{"show each mailbox", d.showMailboxes},
		{"run doctor on both hosts", d.doctorBoth},
	}
	for i, s := range steps {
		d.say("[%d/%d] %s", i+1, len(steps), s.name)
		if err := s.fn(ctx); err != nil {
			return fmt.Errorf("step %d (%s): %w", i+1, s.name, err)
		}
	}
	return nil
}

func (d *run) say(format string, args ...any) {
	fmt.Fprintf(d.out, "demo: "+format+"\n", args...)
}

// detail prints the lines of s indented under the current step.
func (d *run) detail(s string) {
	for _, l := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		fmt.Fprintf(d.out, "      %s\n", l)
	}
}

// env is the children's environment: this process's without the agentmbx variables (every
// path is given with a flag), and without the second a race-enabled binary sleeps at exit.
func (d *run) env() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "MBX_") || strings.HasPrefix(kv, "GORACE=") {
			continue
		}
		env = append(env, kv)
	}
	gorace := "atexit_sleep_ms=0"
	if v := os.Getenv("GORACE"); v != "" {
		gorace = v + " " + gorace
	}
	return append(env, "GORACE="+gorace)
}

// writeLogs writes each child's output to NAME.log in the directory (a restarted child's
// after its earlier run's).
func (d *run) writeLogs() {
	logs := map[string]string{}
	var names []string
	for _, p := range d.procs {
		if _, ok := logs[p.name]; !ok {
			names = append(names, p.name)
		}
		logs[p.name] += p.log.String()
	}
	for _, n := range names {
		_ = os.WriteFile(filepath.Join(d.dir, n+".log"), []byte(logs[n]), 0o600)
	}
}

// dumpLogs writes the last lines of each child's output to the narration (after a failed step).
func (d *run) dumpLogs() {
	for _, p := range d.procs {
		log := p.log.String()
		lines := strings.Split(strings.TrimRight(log, "\n"), "\n")
		if len(lines) > 15 {
			lines = lines[len(lines)-15:]
		}
		d.say("last lines of %s:", p.name)
		d.detail(strings.Join(lines, "\n"))
	}
}

// tally is the oracle's count of every message sent, from every mailbox the demo sent to.
func (d *run) tally(ctx context.Context) Result {
	boxes, err := d.boxes(ctx)
	t := oracle.Count(d.sent, boxes, &d.watch)
	d.problems = t.Problems
	res := resultOf(t)
	if err != nil {
		res.OK, res.Failed = false, err.Error()
	}
	return res
}

// resultOf is the demo's figures of the oracle's count.
func resultOf(t oracle.Tally) Result {
	return Result{Sent: t.Messages, Delivered: t.Delivered, Lost: t.Lost, Duplicated: t.Duplicated, WentBack: t.WentBack, OK: t.OK()}
}

// boxes lists every copy in the mailboxes the demo sends to (inbox --all --json of the agent of
// each host created so far).
func (d *run) boxes(ctx context.Context) (map[oracle.Mailbox][]oracle.Copy, error) {
	out := map[oracle.Mailbox][]oracle.Copy{}
	for _, h := range d.hosts {
		msgs, err := d.inbox(ctx, h)
		if err != nil {
			return out, err
		}
		m := h.mailbox()
		out[m] = []oracle.Copy{}
		for _, msg := range msgs {
			out[m] = append(out[m], oracle.Copy{ID: msg.ID, State: msg.State, Deliveries: msg.Deliveries})
		}
	}
	return out, nil
}

func (h *hostProc) mailbox() oracle.Mailbox { return oracle.Mailbox{Host: h.name, Agent: h.agent} }

func (d *run) inbox(ctx context.Context, h *hostProc) ([]api.Message, error) {
	out, err := d.must(ctx, "inbox", "--home", h.home, "--as", h.agent, "--all", "--limit", "0", "--json")
	if err != nil {
		return nil, err
	}
	var msgs []api.Message
	if err := json.Unmarshal([]byte(out), &msgs); err != nil {
		return nil, fmt.Errorf("inbox of %s: %w", h.name, err)
	}
	return msgs, nil
}
