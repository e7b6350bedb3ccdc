// Command agentmbx is mail between AI agents on different machines: the host daemon and its
// client commands, and the relay that carries sealed mail between networks.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := Main(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(exitCode(err))
}

// exitCode maps Main's error to the process exit status: 0 on success, 2 for usage errors, 1 for
// everything else. The error itself has been printed by Main.
func exitCode(err error) int {
	var ue *usageError
	var es *exitStatus
	switch {
	case err == nil:
		return 0
	case errors.As(err, &es):
		return es.code
	case errors.As(err, &ue):
		return 2
	default:
		return 1
	}
}

// usageError marks an error in how a command was called.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// printErr writes "agentmbx: <err>" and, for errors that carry one, a hint line.
func printErr(w interface{ Write([]byte) (int, error) }, err error) {
	fmt.Fprintf(w, "agentmbx: %v\n", err)
	var h interface{ Hint() string }
	if errors.As(err, &h) && h.Hint() != "" {
		fmt.Fprintf(w, "hint: %s\n", h.Hint())
	}
}
