package demo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/agentmbx/agentmbx/internal/syncbuf"
)

// cmdTimeout bounds one short command (send, inbox, relay set, ...).
const cmdTimeout = 30 * time.Second

// proc is a long-running child: the relay or a host daemon.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  *syncbuf.Buffer
	done chan struct{}
	err  error
}

// start runs bin with args in the background, its output kept in its log.
func (d *run) start(name string, env []string, args ...string) (*proc, error) {
	p := &proc{name: name, log: &syncbuf.Buffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(d.cfg.Bin, args...)
	p.cmd.Env = append(d.env(), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	d.procs = append(d.procs, p)
	return p, nil
}

// exited reports whether the child has exited.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kill sends SIGKILL and waits for the child to be gone.
func (p *proc) kill() {
	if p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// stop sends SIGTERM and waits for a clean exit (SIGKILL after timeout).
func (p *proc) stop(timeout time.Duration) error {
	if p.exited() {
		return fmt.Errorf("%s had exited already: %v", p.name, p.err)
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(timeout):
		p.kill()
		return fmt.Errorf("%s did not stop on SIGTERM within %s", p.name, timeout)
	}
	if p.err != nil {
		return fmt.Errorf("%s exited with %v after SIGTERM", p.name, p.err)
	}
	return nil
}

// result is the outcome of a short command.
type result struct {
	stdout, stderr string
	code           int
}

// exec runs a short command and waits for it.
func (d *run) exec(ctx context.Context, stdin string, args ...string) (result, error) {
	ctx, cancel := context.WithTimeout(ctx, cmdTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, d.cfg.Bin, args...)
	cmd.Env = d.env()
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := result{out.String(), errb.String(), 0}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		return r, fmt.Errorf("agentmbx %s: %w", strings.Join(args, " "), err)
	}
	return r, nil
}

// must runs a short command that has to exit 0 and returns its standard output.
func (d *run) must(ctx context.Context, args ...string) (string, error) {
	return d.mustIn(ctx, "", args...)
}

func (d *run) mustIn(ctx context.Context, stdin string, args ...string) (string, error) {
	r, err := d.exec(ctx, stdin, args...)
	if err != nil {
		return "", err
	}
	if r.code != 0 {
		return "", fmt.Errorf("agentmbx %s: exit %d: %s", strings.Join(args, " "), r.code, strings.TrimSpace(r.stderr))
	}
	return r.stdout, nil
}

// waitAddr waits for an address file to name a bound host:port while p runs.
func waitAddr(ctx context.Context, p *proc, file string) (string, error) {
	for {
		if b, err := os.ReadFile(file); err == nil {
			addr := strings.TrimSpace(string(b))
			if _, port, err := net.SplitHostPort(addr); err == nil && port != "0" && port != "" {
				return addr, nil
			}
		}
		if p.exited() {
			return "", fmt.Errorf("%s exited: %v\n%s", p.name, p.err, p.log.String())
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("%s did not write its address: %w", p.name, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// poll calls cond until it holds or ctx ends; the error names what was awaited and cond's last
// word.
func poll(ctx context.Context, what string, cond func() (bool, string, error)) error {
	last := ""
	for {
		ok, msg, err := cond()
		if err != nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		if ok {
			return nil
		}
		last = msg
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w (last: %s)", what, ctx.Err(), last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
