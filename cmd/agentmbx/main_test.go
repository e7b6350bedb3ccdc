package main

import (
	"context"
	"os"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/agentmbx/agentmbx/relayserver/pgstore/pgtest"
)

// TestMain lets the test binary act as the agentmbx command inside testscript scripts, so the
// scripts in testdata/script exercise the real command line, exit codes included. The PostgreSQL
// cluster of the replica tests, if one was started, stops after the tests.
func TestMain(m *testing.M) {
	testscript.Main(pgtest.Wrap(m), map[string]func(){
		"agentmbx": func() {
			os.Exit(exitCode(Main(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr)))
		},
	})
}

func TestScripts(t *testing.T) {
	testscript.Run(t, testscript.Params{Dir: "testdata/script"})
}
