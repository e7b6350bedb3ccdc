package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
)

func newIDCmd() *cobra.Command {
	var (
		home, addr   string
		card, asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "id [--card [--addr HOST:PORT]] [--json]",
		Short: "Show this host's identity, or print its signed host card",
		Long: `Show this host's name, fingerprint and host key. With --card, print its signed host card
(name, host key, enc key, optional LAN address, time) for ` + "`agentmbx peers add`" + ` on another host;
--addr names the address that host should dial.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if addr != "" && !card {
				return usageErr("--addr goes with --card", "id: --addr without --card")
			}
			return withConn(cmd, home, func(ctx context.Context, c *conn) error {
				w := cmd.OutOrStdout()
				if card {
					b, err := c.Card(ctx, addr)
					if err != nil {
						return err
					}
					if len(b) > 0 && b[len(b)-1] != '\n' {
						b = append(b, '\n')
					}
					_, err = w.Write(b)
					return err
				}
				st, err := c.Status(ctx)
				if err != nil {
					return err
				}
				if asJSON {
					return printJSON(w, st)
				}
				daemon := "not running"
				if st.Daemon {
					daemon = "running"
				}
				fmt.Fprintf(w, "host:        %s\nfingerprint: %s\nhost key:    %s\n", st.Host, st.Fingerprint, st.HostPubkey)
				if st.Listen != "" {
					fmt.Fprintf(w, "listen:      %s\n", st.Listen)
				}
				if st.LANError != "" {
					fmt.Fprintf(w, "LAN:         not listening (%s); retried with backoff, local and relay mail go on\n", st.LANError)
				}
				_, err = fmt.Fprintf(w, "daemon:      %s\npeers:       %d\nagents:      %d\n", daemon, st.Peers, st.Agents)
				printLANAlerts(w, st.LANAlerts)
				if st.Rotation != nil {
					printRotation(w, st.Rotation)
				}
				return err
			})
		},
	}
	cmd.AddCommand(newIDRotateCmd())
	addHomeFlag(cmd, &home)
	cmd.Flags().BoolVar(&card, "card", false, "print the signed host card")
	cmd.Flags().StringVar(&addr, "addr", "", "with --card: the LAN address (host:port) peers should dial")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the identity as JSON")
	return cmd
}
