// Package demo runs `agentmbx demo`: on this machine, in a temporary directory, a relay and two
// hosts "home" and "work" with no LAN route between them, driven through the real agentmbx
// binary as child processes (the code paths a user runs). The hosts pair by card, pin the relay
// key with --key and send mail both ways; the relay is SIGKILLed while mail is on its way and
// restarted; a restore drill backs the relay up, lets more mail reach it, restores the backup
// under a new epoch and has the hosts re-push and re-pull. The mailboxes are shown, doctor runs
// on both hosts, and the demo ends with one line:
//
//	demo: sent=N delivered=N lost=0 duplicated=0
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
}

// Result is what the demo proved. OK is false when a message was lost or duplicated or a step
// failed (Failed names it).
type Result struct {
	Sent       int     `json:"sent"`
	Delivered  int     `json:"delivered"`
	Lost       int     `json:"lost"`
	Duplicated int     `json:"duplicated"`
	OK         bool    `json:"ok"`
	Failed     string  `json:"failed,omitempty"`
	Seconds    float64 `json:"seconds"`
	Dir        string  `json:"dir,omitempty"` // with Keep
}

// Line is the summary line.
func (r Result) Line() string {
	return fmt.Sprintf("demo: sent=%d delivered=%d lost=%d duplicated=%d", r.Sent, r.Delivered, r.Lost, r.Duplicated)
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
	// sent maps each message id to the mailbox it must reach, once.
	sent  map[string]mailbox
	order []string
}

// mailbox is an agent on a host.
type mailbox struct{ host, agent string }

func (m mailbox) String() string { return m.agent + "@" + m.host }

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
	d := &run{cfg: cfg, dir: dir, out: cfg.Out, hosts: map[string]*hostProc{}, sent: map[string]mailbox{}}
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
	if res.Lost > 0 || res.Duplicated > 0 || res.Delivered != res.Sent {
		res.OK = false
		res.Failed = "mail was lost or duplicated"
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
		{"restore drill: backup, more mail, stop, restore, new epoch, re-push and re-pull", d.restoreDrill},
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

// tally counts, for every message sent, the copies in the mailbox it was sent to.
func (d *run) tally(ctx context.Context) Result {
	copies, err := d.copies(ctx)
	res := score(d.order, copies)
	if err != nil {
		res.OK, res.Failed = false, err.Error()
	}
	return res
}

// score counts the messages sent (ids) that arrived, were lost, or arrived more than once.
func score(ids []string, copies map[string]int) Result {
	res := Result{Sent: len(ids)}
	for _, id := range ids {
		switch n := copies[id]; {
		case n == 0:
			res.Lost++
		default:
			res.Delivered++
			res.Duplicated += n - 1
		}
	}
	res.OK = res.Lost == 0 && res.Duplicated == 0
	return res
}

// message is the part of an inbox entry the demo reads.
type message struct {
	ID      string `json:"id"`
	From    string `json:"from"`
	Subject string `json:"subject"`
	Agent   string `json:"agent"`
}

// copies counts the messages with each id in the mailboxes the demo sent to.
func (d *run) copies(ctx context.Context) (map[string]int, error) {
	n := map[string]int{}
	for _, h := range d.hosts {
		msgs, err := d.inbox(ctx, h)
		if err != nil {
			return n, err
		}
		for _, m := range msgs {
			if want, ok := d.sent[m.ID]; ok && want.host == h.name && want.agent == m.Agent {
				n[m.ID]++
			}
		}
	}
	return n, nil
}

func (d *run) inbox(ctx context.Context, h *hostProc) ([]message, error) {
	out, err := d.must(ctx, "inbox", "--home", h.home, "--as", h.agent, "--all", "--json")
	if err != nil {
		return nil, err
	}
	var msgs []message
	if err := json.Unmarshal([]byte(out), &msgs); err != nil {
		return nil, fmt.Errorf("inbox of %s: %w", h.name, err)
	}
	return msgs, nil
}
