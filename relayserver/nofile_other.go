//go:build !unix

package relayserver

// NoFileLimit is this process's open-file limit; 0: unknown here.
func NoFileLimit() uint64 { return 0 }
