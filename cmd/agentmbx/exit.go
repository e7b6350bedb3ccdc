package main

import "fmt"

// exitStatus ends a command with a status other than 0 after it printed everything it had to say
// (doctor with a failing check, relay status while relay use is stopped): Main prints no error
// line for it.
type exitStatus struct {
	code int
	why  string
}

func (e *exitStatus) Error() string { return fmt.Sprintf("exit status %d: %s", e.code, e.why) }
