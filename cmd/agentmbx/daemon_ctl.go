package main

// `agentmbx daemon stop` and `agentmbx daemon status`: the running daemon, through its control
// socket.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/client"
	"github.com/agentmbx/agentmbx/host"
)

// exitNoDaemon is `daemon status`'s exit status when no daemon runs (as systemctl is-active).
const exitNoDaemon = 3

// dialDaemon connects to the daemon of the home named by homeFlag; ok is false when none runs.
func dialDaemon(ctx context.Context, homeFlag string) (c *client.Client, home string, ok bool, err error) {
	home, err = host.ResolveHome(homeFlag)
	if err != nil {
		return nil, "", false, err
	}
	c, err = client.Dial(ctx, home)
	if errors.Is(err, client.ErrNoDaemon) {
		return nil, home, false, nil
	}
	return c, home, err == nil, err
}

func newDaemonStopCmd() *cobra.Command {
	var (
		home    string
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "stop [--timeout DURATION]",
		Short: "Stop the running daemon gracefully and wait until it has exited",
		Long: `Stop the daemon of this host home the way SIGTERM does: it stops taking requests, sends in
flight finish or stay pending (nothing is lost), the store closes. The command returns once the
daemon's process has exited (exit 0), or fails after --timeout. With no daemon running it says
so and exits 0.`,
		Example: `  agentmbx daemon stop
  agentmbx daemon stop --home ./work --timeout 1m`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			c, dir, ok, err := dialDaemon(ctx, home)
			if err != nil {
				return err
			}
			if !ok {
				fmt.Fprintf(cmd.OutOrStdout(), "no daemon runs for %s\n", dir)
				return nil
			}
			defer c.Close()
			st, err := c.StopDaemon(ctx)
			if err != nil {
				return explain(err)
			}
			ctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			if err := waitExited(ctx, st.PID); err != nil {
				return hint(fmt.Errorf("the daemon (pid %d) is still running after %s", st.PID, timeout),
					"it may be finishing a long request; wait and run `%s`, or send it SIGKILL (nothing answered is lost)", hostCommand(home, "daemon", "status"))
			}
			fmt.Fprintf(cmd.OutOrStdout(), "daemon stopped (pid %d)\n", st.PID)
			return nil
		},
	}
	addHomeFlag(cmd, &home)
	cmd.Flags().DurationVar(&timeout, "timeout", 30*time.Second, "how long to wait for the daemon to exit")
	return cmd
}

// waitExited waits until the process pid is gone (or a zombie, waiting for its parent).
func waitExited(ctx context.Context, pid int) error {
	if pid <= 0 {
		return fmt.Errorf("the daemon named no process id")
	}
	t := time.NewTicker(25 * time.Millisecond)
	defer t.Stop()
	for {
		if processGone(pid) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// processGone reports whether pid no longer runs: it does not exist, or it has exited and only
// waits for its parent to reap it (a zombie, on Linux).
func processGone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	if runtime.GOOS != "linux" {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return errors.Is(err, os.ErrNotExist)
	}
	// The state follows the command name, which is in parentheses and may hold any byte.
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] == 'Z' || s[i+2] == 'X'
	}
	return false
}

func newDaemonStatusCmd() *cobra.Command {
	var (
		home    string
		jsonOut bool
	)
	cmd := &cobra.Command{
		Use:   "status [--json]",
		Short: "Whether the daemon runs, and its process, uptime, LAN, relay and outbox",
		Long: `Show the daemon of this host home: its process id, uptime and version, the LAN listener
(listening, retrying a failed bind, or off), the relay link (none, ok, failing, not-enrolled,
stopped), and the outbox rows by state. Exits 0 while a daemon runs and 3 when none does (like
systemctl is-active), so scripts can test it.`,
		Example: `  agentmbx daemon status
  agentmbx daemon status --json || echo "not running"`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			c, dir, ok, err := dialDaemon(ctx, home)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if !ok {
				if jsonOut {
					if err := printJSON(out, api.DaemonStatus{Home: dir, LAN: "off", Relay: "none", Outbox: map[string]int{}}); err != nil {
						return err
					}
				} else {
					fmt.Fprintf(out, "daemon: not running (home %s)\n", dir)
				}
				return &exitStatus{code: exitNoDaemon, why: "no daemon runs"}
			}
			defer c.Close()
			st, err := c.DaemonStatus(ctx)
			if err != nil {
				return explain(err)
			}
			if jsonOut {
				return printJSON(out, st)
			}
			printDaemonStatus(out, st)
			return nil
		},
	}
	addHomeFlag(cmd, &home)
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print one JSON object")
	return cmd
}

func printDaemonStatus(w io.Writer, st api.DaemonStatus) {
	fmt.Fprintf(w, "daemon: running, pid %d, up %s (since %s), version %s\n", st.PID,
		time.Duration(st.UptimeS)*time.Second, st.StartedAt, st.Version)
	fmt.Fprintf(w, "host:   %s (home %s)\n", st.Host, st.Home)
	switch st.LAN {
	case "listening":
		fmt.Fprintf(w, "lan:    listening on %s\n", st.Listen)
	case "retrying":
		fmt.Fprintf(w, "lan:    not listening, bind retried: %s\n", st.LANError)
	default:
		fmt.Fprintf(w, "lan:    %s\n", st.LAN)
	}
	relay := st.Relay
	if st.RelayURL != "" {
		relay += " (" + st.RelayURL + ")"
	}
	if len(st.RelayProblems) > 0 {
		relay += "; failing: " + strings.Join(st.RelayProblems, ", ")
	}
	fmt.Fprintf(w, "relay:  %s\n", relay)
	for _, r := range st.Reach {
		line := r.State
		if r.Since != "" {
			line += " since " + r.Since
		}
		if r.OutageSince != "" && r.State != "down" {
			line += " (no answer since " + r.OutageSince + ")"
		}
		if r.State == "down" {
			line += "; probed every 5 s, waiting mail goes when it answers"
		}
		fmt.Fprintf(w, "reach:  %s %s\n", r.Target, line)
	}
	var parts []string
	for _, s := range api.OutboxStates() {
		parts = append(parts, fmt.Sprintf("%s %d", s, st.Outbox[s]))
	}
	fmt.Fprintf(w, "outbox: %s\n", strings.Join(parts, ", "))
	printLANAlerts(w, st.LANAlerts)
}

// printLANAlerts prints one line per peer whose LAN address answers without its signature.
func printLANAlerts(w io.Writer, alerts []api.LANAlert) {
	for _, a := range alerts {
		fmt.Fprintf(w, "ALERT:  %s at %s: %s (pinned %s; since %s): its mail waits; see `agentmbx doctor`\n",
			a.Host, a.Addr, api.LANAlertSummary, a.Fingerprint, a.Since)
	}
}
