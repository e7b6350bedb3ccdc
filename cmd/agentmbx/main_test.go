package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/agentmbx/agentmbx/client"
	"github.com/agentmbx/agentmbx/relayserver/pgstore/pgtest"
	"github.com/agentmbx/agentmbx/relayserver/relaybench"
)

// TestMain lets the test binary act as the agentmbx command inside testscript scripts, so the
// scripts in testdata/script exercise the real command line, exit codes included. The PostgreSQL
// cluster of the replica tests, if one was started, stops after the tests.
func TestMain(m *testing.M) {
	if os.Getenv(relaybench.EnvLoader) != "" { // a load process of relay bench --parked
		os.Exit(exitCode(Main(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr)))
	}
	testscript.Main(pgtest.Wrap(m), map[string]func(){
		"agentmbx": func() {
			os.Exit(exitCode(Main(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr)))
		},
	})
}

func TestScripts(t *testing.T) {
	testscript.Run(t, testscript.Params{Dir: "testdata/script", Cmds: scriptCmds})
}

// scriptCmds are the scripts' own commands beside testscript's.
var scriptCmds = map[string]func(ts *testscript.TestScript, neg bool, args []string){
	// exits N PROG ARGS... runs PROG (as exec does: its output becomes stdout and stderr) and
	// requires exit status N.
	"exits": func(ts *testscript.TestScript, neg bool, args []string) {
		if neg || len(args) < 2 {
			ts.Fatalf("usage: exits N PROG [ARGS...]")
		}
		want, err := strconv.Atoi(args[0])
		ts.Check(err)
		err = ts.Exec(args[1], args[2:]...)
		got := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			got = ee.ExitCode()
		} else {
			ts.Check(err)
		}
		if got != want {
			ts.Fatalf("%s exited %d, want %d", args[1], got, want)
		}
	},
	// waitdaemon HOME waits (up to a minute) until the daemon of $WORK/HOME answers on its socket.
	"waitdaemon": func(ts *testscript.TestScript, neg bool, args []string) {
		if neg || len(args) != 1 {
			ts.Fatalf("usage: waitdaemon HOME")
		}
		home := ts.MkAbs(args[0])
		deadline := time.Now().Add(time.Minute)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			c, err := client.Dial(ctx, home)
			cancel()
			if err == nil {
				c.Close()
				return
			}
			if time.Now().After(deadline) {
				ts.Fatalf("the daemon of %s did not answer: %v", home, err)
			}
			time.Sleep(20 * time.Millisecond) // a real child process starting
		}
	},
}
