//go:build !unix

package relaybench

import "time"

// cpuTime is unknown here: the result leaves the CPU figures at zero.
func cpuTime() (time.Duration, bool) { return 0, false }
