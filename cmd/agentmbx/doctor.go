package main

import (
	"os"

	"github.com/spf13/cobra"

	"github.com/agentmbx/agentmbx/doctor"
	"github.com/agentmbx/agentmbx/host"
	"github.com/agentmbx/agentmbx/internal/version"
)

func newDoctorCmd() *cobra.Command {
	var (
		home   string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "doctor [--json]",
		Short: "Check this host, its peers and its relay, and say how to fix what is wrong",
		Long: `Check the host and say what is wrong, each with a fix: the identity and file modes, the daemon
and its version, each peer (a signed probe over the LAN, or relay-only), the relay (reachable,
the key it serves against the pin, clock skew, enrolment under the current key and epoch, the
enc-key ad, the sender allowlist), the outbox (rows by state, the oldest pending, rows that ended
undelivered since the last doctor) and the quarantine.

It works with or without a running daemon (it reads the store when none runs). Colour and marks
on a terminal; plain text when piped or with NO_COLOR set. It exits 1 when any check fails.
--json prints {"ok": bool, "checks": [{"id", "status", "summary", "detail", "fix"}]} with
status ok, warn, fail or info. The time of each run is kept in doctor.json in the home.`,
		Example: `  agentmbx doctor
  agentmbx doctor --json | jq '.checks[] | select(.status != "ok")'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			dir, err := host.ResolveHome(home)
			if err != nil {
				return err
			}
			env := doctor.Env{Home: dir, HomeFlag: home, Version: version.String()}
			if _, serr := os.Stat(dir); serr == nil {
				c, err := openHost(cmd.Context(), cmd, home)
				if err != nil {
					env.OpenErr = err
				} else {
					defer c.Close()
					env.Host, env.Relay, env.Daemon = c, c.relay(), c.daemon != nil
				}
			}
			rep := doctor.Run(cmd.Context(), env)
			w := cmd.OutOrStdout()
			switch {
			case asJSON:
				err = rep.WriteJSON(w)
			case styledOutput(w):
				err = rep.WriteStyled(w)
			default:
				err = rep.WritePlain(w)
			}
			if err == nil && !rep.OK {
				return &exitStatus{code: 1, why: "doctor: a check failed"}
			}
			return err
		},
	}
	addHomeFlag(cmd, &home)
	cmd.Flags().BoolVar(&asJSON, "json", false, `print {"ok", "checks": [{"id", "status", "summary", "detail", "fix"}]}`)
	return cmd
}

// styledOutput reports whether w is a terminal that may get colour (tableOutOf).
func styledOutput(w any) bool {
	out := tableOutOf(w)
	return out.tty && out.color
}
