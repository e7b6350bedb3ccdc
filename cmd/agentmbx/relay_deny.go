package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/relayserver"
	"github.com/agentmbx/agentmbx/relayserver/pgstore"
	"github.com/agentmbx/agentmbx/relayserver/sqlitestore"
)

// denyFlags select the store and the entry of the `relay deny` commands.
type denyFlags struct {
	storeDir, db          string
	fingerprint, clientID string
}

func (f *denyFlags) addStore(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.storeDir, "store-dir", "", "relay store directory (default $"+relayserver.EnvRelayDir+")")
	cmd.Flags().StringVar(&f.db, "db", "", dbFlagHelp)
}

func (f *denyFlags) addEntry(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.fingerprint, "fingerprint", "", "a host key's fingerprint (or its base64 key)")
	cmd.Flags().StringVar(&f.clientID, "client-id", "", "an account token's client_id")
}

// entry is the kind and value the flags name: exactly one of --fingerprint and --client-id.
func (f *denyFlags) entry(command string) (relayserver.DenyKind, string, error) {
	switch {
	case (f.fingerprint == "") == (f.clientID == ""):
		return "", "", usageErr("pass --fingerprint FP or --client-id ID", "relay deny %s: name exactly one entry", command)
	case f.fingerprint != "":
		return relayserver.DenyHost, f.fingerprint, nil
	default:
		return relayserver.DenyClient, f.clientID, nil
	}
}

// open opens the deny list of the store the flags name. A SQLite store that a relay serves is
// opened without its lock (sqlitestore.OpenDenyFile).
func (f *denyFlags) open(ctx context.Context, command string) (relayserver.DenyStore, func() error, error) {
	if db := relayDB(f.db); db != "" && f.storeDir == "" {
		st, err := pgstore.Open(ctx, db, &pgstore.Options{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			return nil, nil, relayStoreHint(err)
		}
		return st, st.Close, nil
	}
	dir, err := relayStoreDir(f.storeDir, "deny "+command)
	if err != nil {
		return nil, nil, err
	}
	if _, err := os.Stat(filepath.Join(dir, sqlitestore.DBFile)); err != nil {
		return nil, nil, fmt.Errorf("relay deny %s: no relay store in %s: %w", command, dir, err)
	}
	st, err := sqlitestore.Open(ctx, dir, &sqlitestore.Options{LockWait: time.Millisecond})
	if err == nil {
		return st, st.Close, nil // no relay serves it
	}
	if !errors.Is(err, relayserver.ErrLocked) {
		return nil, nil, relayStoreHint(err)
	}
	df, err := sqlitestore.OpenDenyFile(ctx, dir)
	if err != nil {
		return nil, nil, err
	}
	return df, df.Close, nil
}

func newRelayDenyCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "deny",
		Short: "Refuse hosts at this relay, by host key fingerprint or account client_id",
		Long: `Refuse hosts at this relay: the deny list, kept in the relay's store (so it survives restarts and
every PostgreSQL replica shares it). Run these commands where the store is, while the relay
serves or not. A running relay reads the list every ` + relayserver.DefaultDenyPollEvery.String() + `; then an entry
revokes the matching enrolments (their hosts' requests fail with 403 and their open long polls
end), and refuses new enrolments of that host key or of account tokens with that client_id.

An entry lasts until removed, or --for DURATION (at least ` + relayserver.MinDenyFor.String() + `, the longest
account-token lifetime). Removing an entry, or its end, does not restore the enrolments it
revoked: each of those hosts enrols again (which a host does by itself), with a fresh token on a
relay that requires one. Mail for a denied host stays queued for it.`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(newRelayDenyAddCmd(), newRelayDenyRemoveCmd(), newRelayDenyListCmd())
	return cmd
}

func newRelayDenyAddCmd() *cobra.Command {
	var f denyFlags
	var life time.Duration
	var note string
	cmd := &cobra.Command{
		Use:   "add (--fingerprint FP | --client-id ID) [--for DURATION] [--note TEXT] [--store-dir DIR | --db URL]",
		Short: "Add an entry to the relay's deny list",
		Example: `  agentmbx relay deny add --store-dir /var/lib/agentmbx-relay --fingerprint 1a2b-3c4d-5e6f-7a8b --note "stolen laptop"
  agentmbx relay deny add --db "$MBX_RELAY_DB" --client-id cli-7 --for 1h`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			kind, value, err := f.entry("add")
			if err != nil {
				return err
			}
			d, err := relayserver.NewDenyEntry(kind, value, time.Now(), life, note)
			if err != nil {
				return usageErr("", "relay deny add: %v", err)
			}
			ds, closeFn, err := f.open(cmd.Context(), "add")
			if err != nil {
				return err
			}
			err = relayserver.AddDeny(cmd.Context(), ds, d)
			if cerr := closeFn(); err == nil {
				err = cerr
			}
			if err != nil {
				return fmt.Errorf("relay deny add: %w", err)
			}
			until := "until removed"
			if !d.Until.IsZero() {
				until = "until " + mbx.ISOTime(d.Until)
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "denied %s %s; a running relay applies it within %s\n",
				d, until, relayserver.DefaultDenyPollEvery)
			return err
		},
	}
	f.addEntry(cmd)
	f.addStore(cmd)
	cmd.Flags().DurationVar(&life, "for", 0, "how long the entry lasts (at least "+relayserver.MinDenyFor.String()+"; default until removed)")
	cmd.Flags().StringVar(&note, "note", "", "why, for the operators (shown by deny list)")
	return cmd
}

func newRelayDenyRemoveCmd() *cobra.Command {
	var f denyFlags
	cmd := &cobra.Command{
		Use:   "remove (--fingerprint FP | --client-id ID) [--store-dir DIR | --db URL]",
		Short: "Remove an entry from the relay's deny list",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			kind, value, err := f.entry("remove")
			if err != nil {
				return err
			}
			ds, closeFn, err := f.open(cmd.Context(), "remove")
			if err != nil {
				return err
			}
			err = relayserver.RemoveDeny(cmd.Context(), ds, kind, value)
			if cerr := closeFn(); err == nil {
				err = cerr
			}
			if errors.Is(err, relayserver.ErrNotFound) {
				return hint(fmt.Errorf("relay deny remove: %w", err), "see 'agentmbx relay deny list'")
			}
			if errors.Is(err, relayserver.ErrBadRequest) {
				return usageErr("", "relay deny remove: %v", err)
			}
			if err != nil {
				return fmt.Errorf("relay deny remove: %w", err)
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "removed %s %s; the hosts it revoked enrol again\n", kind, value)
			return err
		},
	}
	f.addEntry(cmd)
	f.addStore(cmd)
	return cmd
}

func newRelayDenyListCmd() *cobra.Command {
	var f denyFlags
	var all, asJSON bool
	cmd := &cobra.Command{
		Use:   "list [--all] [--json] [--store-dir DIR | --db URL]",
		Short: "List the relay's deny list (active entries; --all shows ended ones too)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ds, closeFn, err := f.open(cmd.Context(), "list")
			if err != nil {
				return err
			}
			l, err := ds.DenyList(cmd.Context())
			if cerr := closeFn(); err == nil {
				err = cerr
			}
			if err != nil {
				return fmt.Errorf("relay deny list: %w", err)
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), denyJSON(l, time.Now(), all))
			}
			return writeDenyList(cmd.OutOrStdout(), l, time.Now(), all)
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "also the entries that have ended (they go when the next entry is added)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the entries as a JSON array")
	f.addStore(cmd)
	return cmd
}

func writeDenyList(out io.Writer, l []relayserver.DenyEntry, now time.Time, all bool) error {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KIND\tVALUE\tADDED\tUNTIL\tNOTE")
	for _, d := range l {
		if !all && !d.Active(now) {
			continue
		}
		until := "removed"
		if !d.Until.IsZero() {
			until = mbx.ISOTime(d.Until)
			if !d.Active(now) {
				until += " (ended)"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", d.Kind, d.Value, mbx.ISOTime(d.AddedAt), until, d.Note)
	}
	return tw.Flush()
}

// denyEntry is a deny-list entry as `relay deny list --json` prints it.
type denyEntry struct {
	Kind    string `json:"kind"`
	Value   string `json:"value"`
	AddedAt string `json:"added_at"`
	Until   string `json:"until,omitempty"` // "" until removed
	Active  bool   `json:"active"`
	Note    string `json:"note,omitempty"`
	// ReclaimedAt and Reclaimed: the last reclaim of the entry's keys ('relay reclaim').
	ReclaimedAt string                     `json:"reclaimed_at,omitempty"`
	Reclaimed   *relayserver.ReclaimResult `json:"reclaimed,omitempty"`
}

// denyJSON is the list as JSON rows: the active entries, or with all every one.
func denyJSON(l []relayserver.DenyEntry, now time.Time, all bool) []denyEntry {
	out := []denyEntry{}
	for _, d := range l {
		if !all && !d.Active(now) {
			continue
		}
		e := denyEntry{Kind: string(d.Kind), Value: d.Value, AddedAt: mbx.ISOTime(d.AddedAt), Active: d.Active(now), Note: d.Note}
		if !d.Until.IsZero() {
			e.Until = mbx.ISOTime(d.Until)
		}
		if !d.ReclaimedAt.IsZero() {
			r := d.Reclaimed
			e.ReclaimedAt, e.Reclaimed = mbx.ISOTime(d.ReclaimedAt), &r
		}
		out = append(out, e)
	}
	return out
}
