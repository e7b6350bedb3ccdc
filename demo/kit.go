package demo

import (
	"context"
	"io"
	"os"
	"time"
)

// Kit lends the demo's child-process orchestration to other drivers of the real binary (the
// soak in package soak): the same children, environment, short commands and waits, so that
// there is one way to run agentmbx as a child.
type Kit struct{ r *run }

// NewKit runs bin's children with the demo's environment; dir holds nothing of the kit's own.
func NewKit(bin string) *Kit {
	return &Kit{r: &run{cfg: Config{Bin: bin}, out: io.Discard}}
}

// Proc is a long-running child started by a Kit.
type Proc struct{ p *proc }

// Start runs the binary with args in the background, env added, its output kept in its log.
func (k *Kit) Start(name string, env []string, args ...string) (*Proc, error) {
	p, err := k.r.start(name, env, args...)
	if err != nil {
		return nil, err
	}
	return &Proc{p}, nil
}

// KillAll SIGKILLs every child the kit started that still runs.
func (k *Kit) KillAll() {
	for _, p := range k.r.procs {
		p.kill()
	}
}

// Logs writes each child's output to NAME.log in dir (a restarted child's after its earlier
// runs').
func (k *Kit) Logs(dir string) {
	k.r.dir = dir
	_ = os.MkdirAll(dir, 0o700)
	k.r.writeLogs()
}

// Must runs a short command that has to exit 0 and returns its standard output.
func (k *Kit) Must(ctx context.Context, args ...string) (string, error) {
	return k.r.must(ctx, args...)
}

// MustIn is Must with stdin as the command's standard input.
func (k *Kit) MustIn(ctx context.Context, stdin string, args ...string) (string, error) {
	return k.r.mustIn(ctx, stdin, args...)
}

// Run runs a short command and returns its output and exit code (err only when it could not
// run at all).
func (k *Kit) Run(ctx context.Context, args ...string) (stdout, stderr string, code int, err error) {
	r, err := k.r.exec(ctx, "", args...)
	return r.stdout, r.stderr, r.code, err
}

// Kill sends SIGKILL and waits for the child to be gone.
func (p *Proc) Kill() { p.p.kill() }

// Stop sends SIGTERM and waits for a clean exit (SIGKILL after timeout).
func (p *Proc) Stop(timeout time.Duration) error { return p.p.stop(timeout) }

// Exited reports whether the child has exited.
func (p *Proc) Exited() bool { return p.p.exited() }

// Log is the child's output so far.
func (p *Proc) Log() string { return p.p.log.String() }

// WaitAddr waits for an --addr-file to name a bound host:port while p runs.
func WaitAddr(ctx context.Context, p *Proc, file string) (string, error) {
	return waitAddr(ctx, p.p, file)
}

// Poll calls cond until it holds or ctx ends; the error names what was awaited and cond's last
// word.
func Poll(ctx context.Context, what string, cond func() (bool, string, error)) error {
	return poll(ctx, what, cond)
}

// Fingerprint is the relay key fingerprint a `relay keygen` or `relay serve` printed in out
// ("" when none).
func Fingerprint(out string) string {
	if m := fingerprintLine.FindStringSubmatch(out); m != nil {
		return m[1]
	}
	return ""
}
