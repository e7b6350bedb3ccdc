// Command agentmbx is mail between AI agents on different machines: the host daemon and its
// client commands, and the relay that carries sealed mail between networks.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"regexp"
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
	fmt.Fprintf(w, "agentmbx: %s\n", userMessage(err))
	var h interface{ Hint() string }
	if errors.As(err, &h) && h.Hint() != "" {
		fmt.Fprintf(w, "hint: %s\n", h.Hint())
	}
}

// pkgPrefix matches the name of one of this module's packages where an error message names the
// package that made it ("host: relay set: ..."): at the start or after another part. Packages
// named like a command (outbox, peers, agents, doctor, ...) are left alone: there the name is
// more often the command the user ran ("outbox: bad --limit").
var pkgPrefix = regexp.MustCompile(`(^|: )(host|relaylink|relayclient|client|mailstore|rotation|lan|pairing|checkpoint|quarantine|relayserver|sqlitestore|pgstore|boltjson|fsutil|mbx|control|api|card|ops): `)

// doubleInvalid matches a package's invalid-input sentinel right after the host's.
var doubleInvalid = regexp.MustCompile(`invalid input: invalid [a-z ]*input: `)

// userMessage is an error as the person who ran the command reads it: what they did and what
// went wrong, without the names of the Go packages the error passed through (which the error
// chain keeps for the logs and for errors.Is).
func userMessage(err error) string {
	s := err.Error()
	for {
		t := pkgPrefix.ReplaceAllString(s, "$1")
		if t == s {
			break
		}
		s = t
	}
	return doubleInvalid.ReplaceAllString(s, "invalid input: ")
}
