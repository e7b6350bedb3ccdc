package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/host"
	"github.com/agentmbx/agentmbx/mbx"
)

func newPeersCmd() *cobra.Command {
	var (
		home   string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "peers [--json]",
		Short: "List the paired hosts",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withConn(cmd, home, func(ctx context.Context, c *conn) error {
				ps, err := c.Peers(ctx)
				if err != nil {
					return err
				}
				if asJSON {
					if ps == nil {
						ps = []api.Peer{}
					}
					return printJSON(cmd.OutOrStdout(), ps)
				}
				if len(ps) == 0 {
					_, err := fmt.Fprintln(cmd.OutOrStdout(), "no peers yet (pair with `agentmbx pair` / `agentmbx join`, or `agentmbx peers add CARD`)")
					return err
				}
				rows := make([][]string, 0, len(ps))
				for _, p := range ps {
					rows = append(rows, []string{p.Host, p.Fingerprint, p.Addr})
				}
				if err := table(cmd.OutOrStdout(), []string{"HOST", "FINGERPRINT", "ADDR"}, rows); err != nil {
					return err
				}
				return printPeerRotations(cmd.OutOrStdout(), ps)
			})
		},
	}
	addHomeFlag(cmd, &home)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the peers as a JSON array")
	cmd.AddCommand(newPeersAddCmd(&home), newPeersRemoveCmd(&home))
	return cmd
}

func newPeersAddCmd(home *string) *cobra.Command {
	var yes, asJSON bool
	cmd := &cobra.Command{
		Use:   "add FILE|-",
		Short: "Pin a host from its signed card (from `agentmbx id --card` on that host)",
		Long: `Pin a host from its signed host card, read from FILE or, with -, from standard input.
The card's fingerprint is shown first: compare it with the one that host's owner sees in
` + "`agentmbx id`" + `, through a channel you trust, then confirm (--yes confirms without asking; without a
terminal and without --yes the command fails rather than wait). A card whose signature fails is
refused.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			card, err := readInput(cmd, args[0], host.MaxCardBytes)
			if err != nil {
				return fmt.Errorf("peers add: %w", err)
			}
			p, err := host.ParseCard(card, time.Now())
			if err != nil {
				return explain(err)
			}
			fp := mbx.Fingerprint(p.HostPubkey)
			w := cmd.OutOrStdout()
			if !asJSON {
				fmt.Fprintf(w, "host:        %s\nfingerprint: %s\n", p.Host, fp)
				if p.Addr != "" {
					fmt.Fprintf(w, "addr:        %s\n", p.Addr)
				}
			}
			if err := confirm(cmd, yes, args[0] == "-", fmt.Sprintf("Pin host %s with fingerprint %s?", p.Host, fp),
				fmt.Sprintf("compare %s with the fingerprint `agentmbx id` shows on %s, then run again with --yes", fp, p.Host)); err != nil {
				return fmt.Errorf("peers add %s: %w", p.Host, err)
			}
			return withConn(cmd, *home, func(ctx context.Context, c *conn) error {
				peer, err := c.AddPeer(ctx, card)
				if err != nil {
					return err
				}
				if asJSON {
					return printJSON(w, peer)
				}
				_, err = fmt.Fprintf(w, "pinned %s (%s)\n", peer.Host, peer.Fingerprint)
				return err
			})
		},
	}
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "pin without asking (after checking the fingerprint)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the pinned peer as JSON")
	return cmd
}

func newPeersRemoveCmd(home *string) *cobra.Command {
	return &cobra.Command{
		Use:               "remove HOST",
		ValidArgsFunction: completePeers,
		Short:             "Unpin a host: nothing more is sent to it or accepted from it",
		Args:              cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withConn(cmd, *home, func(ctx context.Context, c *conn) error {
				if err := c.RemovePeer(ctx, args[0]); err != nil {
					return err
				}
				_, err := fmt.Fprintf(cmd.OutOrStdout(), "removed %s\n", args[0])
				return err
			})
		},
	}
}
