//go:build unix

package relaybench

import (
	"syscall"
	"time"
)

// cpuTime is the user and system CPU time the process has used so far; ok is false where the
// platform does not say.
func cpuTime() (d time.Duration, ok bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
