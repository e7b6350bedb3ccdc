package testkit

import (
	"bytes"
	"fmt"
	"io"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"
)

func TestClockMovesOnlyWhenTold(t *testing.T) {
	start := time.Date(2026, 10, 2, 10, 0, 0, 0, time.UTC)
	c := NewClock(start)
	if !c.Now().Equal(start) {
		t.Fatalf("Now = %s, want %s", c.Now(), start)
	}
	c.Advance(time.Minute)
	if want := start.Add(time.Minute); !c.Now().Equal(want) {
		t.Fatalf("after Advance: %s, want %s", c.Now(), want)
	}
	c.Set(start)
	if !c.Now().Equal(start) {
		t.Fatalf("after Set: %s, want %s", c.Now(), start)
	}
}

func TestRandIsSeeded(t *testing.T) {
	read := func(seed uint64) []byte {
		b := make([]byte, 32)
		if _, err := io.ReadFull(Rand(seed), b); err != nil {
			t.Fatal(err)
		}
		return b
	}
	if !bytes.Equal(read(1), read(1)) || bytes.Equal(read(1), read(2)) {
		t.Fatal("Rand: the same seed must give the same bytes, another seed others")
	}
}

func TestSyncBufferKeepsWhatIsWritten(t *testing.T) {
	var b SyncBuffer
	done := make(chan struct{})
	for range 4 {
		go func() { b.Write([]byte("ab")); done <- struct{}{} }()
	}
	for range 4 {
		<-done
	}
	if got := b.String(); got != "abababab" {
		t.Fatalf("String = %q", got)
	}
}

func TestKilledBySIGKILL(t *testing.T) {
	if KilledBySIGKILL(nil) || KilledBySIGKILL(exec.Command("false").Run()) {
		t.Fatal("a clean exit or exit status 1 counted as SIGKILL")
	}
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		SkipMissing(t, "no sleep command: %v", err)
	}
	cmd.Process.Kill()
	if err := cmd.Wait(); !KilledBySIGKILL(err) {
		t.Fatalf("a killed child: %v, not counted as SIGKILL", err)
	}
}

// SkipMissing skips outside CI and fails under CI=true.
func TestSkipMissing(t *testing.T) {
	for _, ci := range []string{"", "true"} {
		t.Run("CI="+ci, func(t *testing.T) {
			t.Setenv("CI", ci)
			var inner testing.T
			ft := &fakeTB{TB: &inner}
			done := make(chan struct{})
			go func() { // Skip and Fatal end the goroutine that calls them
				defer close(done)
				SkipMissing(ft, "no %s here", "tool")
			}()
			<-done
			wantFail := ci == "true"
			if ft.failed != wantFail || ft.skipped == wantFail || !strings.Contains(ft.msg, "no tool here") {
				t.Fatalf("CI=%q: failed %v skipped %v (%q), want failed %v", ci, ft.failed, ft.skipped, ft.msg, wantFail)
			}
		})
	}
}

// fakeTB records a Skip or a Fatal and ends the calling goroutine, as testing.T does.
type fakeTB struct {
	testing.TB
	failed, skipped bool
	msg             string
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Fatalf(format string, args ...any) {
	f.failed, f.msg = true, fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func (f *fakeTB) Skip(args ...any) {
	f.skipped, f.msg = true, fmt.Sprint(args...)
	runtime.Goexit()
}
