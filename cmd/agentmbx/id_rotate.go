package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/client"
	"github.com/agentmbx/agentmbx/host"
	"github.com/agentmbx/agentmbx/internal/termtext"
	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/rotation"
)

// rotateBudget bounds the network steps `id rotate` runs itself; the daemon does the rest.
const rotateBudget = 2 * time.Minute

func newIDRotateCmd() *cobra.Command {
	var (
		home   string
		yes    bool
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "rotate [--yes]",
		Short: "Replace this host's host key and enc key, and tell the peers and the relay",
		Long: `Replace this host's host key and enc key. A rotation record signed by the old and the new
key goes to every paired peer (over the LAN, and through the relay as a rotation notice) and to
the relay, which moves this host's queue to the new key. The old keys are kept as retired: mail
and receipts signed or sealed before the rotation stay valid.

With a daemon running, the daemon rotates: it finishes the requests in flight (new ones wait a
moment), makes the new keys and swaps them, serves again with them, and tells the peers and the
relay on its own; mail keeps flowing both ways. Without one, this command makes the new keys,
swaps them and tries every step once; whatever is left (an unreachable peer or relay) is retried
by ` + "`agentmbx daemon`" + ` until done. A crash at any point is resumed at the next start.
` + "`agentmbx id`" + ` shows the progress.`,
		Example: `  agentmbx id rotate --yes`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			dir, err := host.ResolveHome(home)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if err := confirm(cmd, yes, false, "Replace this host's keys? Peers and the relay are told; this cannot be undone.",
				"pass --yes to rotate the host key"); err != nil {
				return err
			}
			if c, err := client.Dial(ctx, dir); err == nil {
				// The daemon rotates: it pauses, swaps the keys, serves again with the new ones
				// and tells the peers and the relay on its own.
				defer c.Close()
				st, err := c.RotateKeys(ctx)
				if err != nil {
					return explain(err)
				}
				if asJSON {
					return printJSON(cmd.OutOrStdout(), st)
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "new host key %s (was %s); the daemon tells the peers and the relay\n",
					st.NewFingerprint, st.OldFingerprint)
				printRotation(cmd.OutOrStdout(), st)
				if st.Done == "" {
					fmt.Fprintln(cmd.ErrOrStderr(), "the daemon carries out the steps left; `agentmbx id` shows the progress")
				}
				return nil
			}
			s, err := host.PrepareRotation(dir, rotation.Options{})
			if err != nil {
				return explain(err)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "new host key %s (was %s); telling peers and the relay…\n",
				mbx.Fingerprint(s.Rec.NewPub), mbx.Fingerprint(s.Rec.OldPub))
			h, err := host.Open(dir, &host.Options{Logger: cliLogger(cmd)})
			if err != nil {
				return explain(err)
			}
			defer h.Close()
			rctx, cancel := context.WithTimeout(ctx, rotateBudget)
			st, err := h.Rotation().Continue(rctx)
			cancel()
			if st == nil {
				return explain(err)
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), st)
			}
			printRotation(cmd.OutOrStdout(), st)
			if st.Done == "" {
				fmt.Fprintln(cmd.ErrOrStderr(), "not every step is done yet: `agentmbx daemon` retries them until they are")
			}
			return nil
		},
	}
	addHomeFlag(cmd, &home)
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "rotate without asking")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the rotation's progress as JSON")
	return cmd
}

// printRotation writes a rotation's progress: each step at the relay and each peer.
func printRotation(w io.Writer, r *api.Rotation) {
	state := "in progress"
	if r.Done != "" {
		state = "done " + r.Done
	}
	fmt.Fprintf(w, "rotation:    %s → %s, started %s, %s\n", r.OldFingerprint, r.NewFingerprint, r.Started, state)
	if rel := r.Relay; rel != nil {
		fmt.Fprintf(w, "  relay %s: notices %s, rotated %s (%d items moved), position reset %s, republished %s\n",
			rel.URL, orDash(rel.Noticed), orDash(rel.Rotated), rel.Moved, orDash(rel.Reset), orDash(rel.Checked))
		if rel.Note != "" {
			fmt.Fprintf(w, "    note: %s\n", termtext.Line(rel.Note))
		}
		if rel.LastError != "" && rel.Checked == "" {
			fmt.Fprintf(w, "    last error: %s\n", termtext.Line(rel.LastError))
		}
	}
	for _, p := range r.Peers {
		fmt.Fprintf(w, "  peer %s: LAN %s, relay notice %s", p.Host, orDash(p.LAN), orDash(p.Notice))
		if p.LAN == "" && p.LastError != "" {
			fmt.Fprintf(w, " (after %d tries: %s)", p.Attempts, termtext.Line(p.LastError))
		}
		fmt.Fprintln(w)
	}
}

// printPeerRotations writes a line for each peer that rotated its host key: when, and the
// fingerprints it retired (still valid for what it signed before).
func printPeerRotations(w io.Writer, ps []api.Peer) error {
	for _, p := range ps {
		if p.RotatedAt == "" && len(p.RetiredFingerprints) == 0 {
			continue
		}
		if _, err := fmt.Fprintf(w, "%s rotated its host key %s; retired: %s\n", p.Host, orDash(p.RotatedAt),
			strings.Join(p.RetiredFingerprints, ", ")); err != nil {
			return err
		}
	}
	return nil
}
