//go:build !linux

package relaybench

import "time"

// threadCPU is unknown here: timings fall back to the wall clock.
func threadCPU() (time.Duration, bool) { return 0, false }
