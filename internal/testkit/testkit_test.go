package testkit

import (
	"bytes"
	"io"
	"os/exec"
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
		t.Skip("no sleep command:", err)
	}
	cmd.Process.Kill()
	if err := cmd.Wait(); !KilledBySIGKILL(err) {
		t.Fatalf("a killed child: %v, not counted as SIGKILL", err)
	}
}
