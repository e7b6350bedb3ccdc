package relaybench

import (
	"crypto/ed25519"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"time"
)

// ed25519Costs times Ed25519 signing and verification of a hop-sized message on this machine,
// each for about d, and returns the mean time of one call.
func ed25519Costs(d time.Duration) (sign, verify time.Duration, err error) {
	pub, priv, err := ed25519.GenerateKey(nil)
	if err != nil {
		return 0, 0, fmt.Errorf("ed25519: %w", err)
	}
	msg := make([]byte, 200)
	var sig []byte
	sign = timeLoop(d, func() { sig = ed25519.Sign(priv, msg) })
	ok := true
	verify = timeLoop(d, func() { ok = ok && ed25519.Verify(pub, msg, sig) })
	if !ok {
		return 0, 0, fmt.Errorf("ed25519: a signature did not verify")
	}
	return sign, verify, nil
}

// timeLoop calls fn for at least d of CPU time (and at least 16 times) and returns the mean CPU
// time of a call: the thread's own where the platform says, else the wall clock's.
func timeLoop(d time.Duration, fn func()) time.Duration {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	clock := threadCPU
	if _, ok := threadCPU(); !ok {
		t0 := time.Now()
		clock = func() (time.Duration, bool) { return time.Since(t0), true }
	}
	start, _ := clock()
	n := 0
	for {
		for range 16 {
			fn()
		}
		n += 16
		if now, _ := clock(); now-start >= d {
			return (now - start) / time.Duration(n)
		}
	}
}

// fsyncRate writes and fsyncs one 4 KiB block after another into a scratch file in dir for about
// d, as a database appending to its log would, and returns the fsyncs per second. The file is
// removed.
func fsyncRate(dir string, d time.Duration) (float64, error) {
	f, err := os.CreateTemp(dir, "fsync-probe-")
	if err != nil {
		return 0, fmt.Errorf("fsync probe: %w", err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	block := make([]byte, 4096)
	const span = 256 // blocks the probe cycles through (1 MiB)
	start := time.Now()
	n := 0
	for n < 8 || time.Since(start) < d {
		if _, err := f.WriteAt(block, int64(n%span)*int64(len(block))); err != nil {
			return 0, fmt.Errorf("fsync probe %s: %w", filepath.Base(f.Name()), err)
		}
		if err := f.Sync(); err != nil {
			return 0, fmt.Errorf("fsync probe %s: %w", filepath.Base(f.Name()), err)
		}
		n++
	}
	return float64(n) / time.Since(start).Seconds(), nil
}
