package relaybench

import (
	"syscall"
	"time"
)

// threadCPU is the CPU time the calling OS thread has used, so a timing on a busy machine counts
// only the work done (the caller locks its goroutine to the thread).
func threadCPU() (time.Duration, bool) {
	const rusageThread = 1 // RUSAGE_THREAD
	var ru syscall.Rusage
	if err := syscall.Getrusage(rusageThread, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
