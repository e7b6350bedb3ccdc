package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/agentmbx/agentmbx/demo"
)

func newDemoCmd() *cobra.Command {
	var keep, asJSON bool
	cmd := &cobra.Command{
		Use:   "demo [--keep] [--json]",
		Short: "Show the whole thing working: a relay and two hosts on this machine, mail that survives a relay crash and restore",
		Long: `Run a relay and two hosts, "home" and "work", on this machine in a temporary directory, with
no LAN route between them, all through this agentmbx binary as child processes on 127.0.0.1:
pair the hosts by card, pin the relay's key with --key, send mail both ways, SIGKILL the relay
while mail is on its way and restart it, run a restore drill (a backup with mail waiting in it,
that mail delivered and read, more mail, restore under a new epoch, re-push and re-pull), show
each mailbox and run doctor on both hosts.

It ends with one line, 'demo: sent=N delivered=N lost=0 duplicated=0 went_back=0' (with --json,
the same figures as a JSON object on standard output and the narration on standard error), and
exits 1 when anything was lost, delivered twice (deliveries are counted, not mailbox rows) or
seen unread after it was read, or a step failed. --keep leaves the directory (stores,
homes, logs) for a look.`,
		Example: `  agentmbx demo
  agentmbx demo --json | jq .
  make demo`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			bin, err := selfPath()
			if err != nil {
				return err
			}
			narration := cmd.OutOrStdout()
			if asJSON {
				narration = cmd.ErrOrStderr()
			}
			res, err := demo.Run(cmd.Context(), demo.Config{Bin: bin, Keep: keep, Out: narration})
			if asJSON {
				if jerr := printJSON(cmd.OutOrStdout(), res); jerr != nil {
					return jerr
				}
			} else {
				fmt.Fprintf(cmd.OutOrStdout(), "%s (%.1fs)\n", res.Line(), res.Seconds)
			}
			if err != nil {
				return err
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&keep, "keep", false, "leave the demo's directory (relay store, host homes, logs)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the figures as a JSON object (narration on standard error)")
	return cmd
}

// selfPath is the path of the running agentmbx, as it was invoked (the demo runs it as its
// children): os.Args[0] looked up on PATH when it names no directory.
func selfPath() (string, error) {
	arg0 := os.Args[0]
	if !strings.ContainsRune(arg0, filepath.Separator) {
		p, err := exec.LookPath(arg0)
		if err == nil {
			return filepath.Abs(p)
		}
		return os.Executable()
	}
	return filepath.Abs(arg0)
}
