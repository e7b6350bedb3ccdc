//go:build unix

package relayserver

import "syscall"

// NoFileLimit is this process's open-file limit (the soft one, which Go raises to the hard one
// at start on Linux); 0 when unknown.
func NoFileLimit() uint64 {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0
	}
	return uint64(rl.Cur)
}
