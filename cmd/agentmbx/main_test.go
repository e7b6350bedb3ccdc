package main

import (
	"context"
	"os"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"
)

// TestMain lets the test binary act as the agentmbx command inside testscript scripts, so the
// scripts in testdata/script exercise the real command line, exit codes included.
func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){
		"agentmbx": func() {
			os.Exit(exitCode(Main(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr)))
		},
	})
}

func TestScripts(t *testing.T) {
	testscript.Run(t, testscript.Params{Dir: "testdata/script"})
}
