package testkit

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// ChildWait bounds how long the helpers below wait for a child: generous, the machine is shared.
const ChildWait = 90 * time.Second

// Child is this test binary run again as a child process in which only the test named runs
// (none when test is ""), with env added to this process's environment. Crash drills run their
// child this way: the child finds its job in env, and a failpoint (MBX_FAILPOINT) kills it.
func Child(test string, env ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), env...)
	return cmd
}

// KilledBySIGKILL reports whether err is the exit of a child that SIGKILL ended.
func KilledBySIGKILL(err error) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

// RunKilled runs cmd to its end and fails t unless SIGKILL ended it (at a failpoint); it returns
// the child's combined output.
func RunKilled(t testing.TB, cmd *exec.Cmd, what string) []byte {
	t.Helper()
	var out SyncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("%s: start: %v", what, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(2 * ChildWait):
		_ = cmd.Process.Kill()
		werr := <-done
		t.Fatalf("%s: still running after %s (killed: %v)\n%s", what, 2*ChildWait, werr, out.String())
	}
	if !KilledBySIGKILL(err) {
		t.Fatalf("%s ended with %v, want death by SIGKILL\n%s", what, err, out.String())
	}
	return []byte(out.String())
}

// Proc is a child process that serves (a relay, a daemon), with its output in Log.
type Proc struct {
	Cmd  *exec.Cmd
	Log  *SyncBuffer
	done chan struct{}
	err  error // the exit error, set before done is closed
}

// StartProc starts cmd with its output in Log; the test's cleanup kills it (and, when the test
// failed, logs its output).
func StartProc(t testing.TB, cmd *exec.Cmd) *Proc {
	t.Helper()
	p := &Proc{Cmd: cmd, Log: &SyncBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.Log, p.Log
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", cmd.Path, err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill() // it may have exited already
		<-p.done
		if t.Failed() {
			t.Logf("%s output:\n%s", cmd.Path, p.Log.String())
		}
	})
	return p
}

// Exited reports whether the process ended, and its exit error.
func (p *Proc) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// Done is closed when the process has ended.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Err is the exit error; read it after Done.
func (p *Proc) Err() error { return p.err }

// WaitAddr waits until the process has written a host:port with a port other than 0 to path
// (an --addr-file), and returns it. It fails t when the process exits first or ChildWait passes.
func (p *Proc) WaitAddr(t testing.TB, path string) string {
	t.Helper()
	deadline := time.Now().Add(ChildWait)
	for {
		if ended, err := p.Exited(); ended {
			t.Fatalf("%s exited: %v\n%s", p.Cmd.Path, err, p.Log.String())
		}
		if b, err := os.ReadFile(path); err == nil {
			addr := strings.TrimSpace(string(b))
			if _, port, err := net.SplitHostPort(addr); err == nil && port != "0" && port != "" {
				return addr
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not write its address to %s\n%s", p.Cmd.Path, path, p.Log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop sends SIGTERM and waits (up to ChildWait) for the process to end; it returns the exit
// error (nil for a clean exit).
func (p *Proc) Stop(t testing.TB) error {
	t.Helper()
	if err := p.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		if ended, perr := p.Exited(); ended {
			return perr
		}
		t.Fatalf("SIGTERM: %v", err)
	}
	select {
	case <-p.done:
		return p.err
	case <-time.After(ChildWait):
		t.Fatalf("%s did not stop on SIGTERM\n%s", p.Cmd.Path, p.Log.String())
		return nil
	}
}

// ProcKB reads a kB field (VmRSS, VmHWM: the peak RSS) of /proc/PID/status. Without /proc (not
// Linux) the test is skipped (SkipMissing: under CI it fails); a field the file does not have
// fails it.
func ProcKB(t testing.TB, pid int, field string) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		SkipMissing(t, "no /proc: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// ReadStatus reads one HTTP response from c in the background and sends its status code on the
// channel it returns, or -1 when no response could be read.
func ReadStatus(c net.Conn) <-chan int {
	got := make(chan int, 1)
	go func() {
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			got <- -1
			return
		}
		resp.Body.Close()
		got <- resp.StatusCode
	}()
	return got
}
