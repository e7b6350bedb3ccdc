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

	"github.com/agentmbx/agentmbx/internal/logkey"
	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/relayserver"
	"github.com/agentmbx/agentmbx/relayserver/pgstore"
	"github.com/agentmbx/agentmbx/relayserver/sqlitestore"
)

// usageStore is what `relay usage` reads.
type usageStore interface {
	Usage(ctx context.Context, topN int) (relayserver.UsageReport, error)
}

// openUsage opens the store the flags name for reading: a SQLite store read-only (a relay may be
// serving it), a PostgreSQL database through its store.
func (f *denyFlags) openUsage(ctx context.Context) (usageStore, func() error, error) {
	if db := relayDB(f.db); db != "" && f.storeDir == "" {
		st, err := pgstore.Open(ctx, db, &pgstore.Options{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			return nil, nil, relayStoreHint(err)
		}
		return st, st.Close, nil
	}
	dir, err := relayStoreDir(f.storeDir, "usage")
	if err != nil {
		return nil, nil, err
	}
	uf, err := sqlitestore.OpenUsageFile(ctx, dir)
	if err != nil {
		return nil, nil, fmt.Errorf("relay usage: no relay store in %s: %w", dir, err)
	}
	return uf, uf.Close, nil
}

func newRelayUsageCmd() *cobra.Command {
	var f denyFlags
	var top int
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "usage [--top N] [--json] [--store-dir DIR | --db URL]",
		Short: "Show what uses the relay store's space, per host key",
		Long: `Show what uses the relay store's space: the queued items and the dedup rows (tombstones
included) in all, and for the host keys charged the most, what each one's queue holds, what it
sent that is still queued, and the dedup rows charged to it as a sender (` + fmt.Sprint(relayserver.DedupRowBytes) + ` bytes each on
the relay-wide limit, at most --max-sender-dedup per key). Safe while the relay serves.

A key that should not hold what it holds: deny it ('relay deny add --fingerprint FP'), then
'relay reclaim --fingerprint FP' deletes what the store holds for it.`,
		Example: `  agentmbx relay usage --store-dir /var/lib/agentmbx-relay
  agentmbx relay usage --db "$MBX_RELAY_DB" --top 50 --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if top < 1 {
				return usageErr("", "relay usage: --top must be at least 1")
			}
			st, closeFn, err := f.openUsage(cmd.Context())
			if err != nil {
				return err
			}
			rep, err := st.Usage(cmd.Context(), top)
			if cerr := closeFn(); err == nil {
				err = cerr
			}
			if err != nil {
				return fmt.Errorf("relay usage: %w", err)
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), usageJSON(rep))
			}
			return writeUsage(cmd.OutOrStdout(), rep)
		},
	}
	cmd.Flags().IntVar(&top, "top", 20, "how many keys to list, those charged the most first")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object")
	f.addStore(cmd)
	return cmd
}

// countsJSON is a number of items and their bytes.
type countsJSON struct {
	Items int64 `json:"items"`
	Bytes int64 `json:"bytes"`
}

// keyUsageJSON is one key of `relay usage --json`.
type keyUsageJSON struct {
	Fingerprint  string     `json:"fingerprint"`
	Pubkey       string     `json:"pubkey"`
	Name         string     `json:"name,omitempty"`
	State        string     `json:"state"` // live, denied, revoked, or unknown (never enrolled)
	Queue        countsJSON `json:"queue"`
	Sent         countsJSON `json:"sent"`
	DedupRows    int64      `json:"dedup_rows"`
	ChargedBytes int64      `json:"charged_bytes"`
}

// usageReportJSON is `relay usage --json`.
type usageReportJSON struct {
	Queued        countsJSON     `json:"queued"`
	DedupRows     int64          `json:"dedup_rows"`
	DedupRowBytes int64          `json:"dedup_row_bytes"`
	ChargedBytes  int64          `json:"charged_bytes"`
	Keys          []keyUsageJSON `json:"keys"`
}

func keyState(e relayserver.Enrolment) string {
	switch {
	case e.HostPubkey == "":
		return "unknown"
	case !e.DeniedAt.IsZero():
		return "denied"
	case !e.Live():
		return "revoked"
	}
	return "live"
}

func usageJSON(r relayserver.UsageReport) usageReportJSON {
	out := usageReportJSON{Queued: countsJSON(r.Queued), DedupRows: r.DedupRows, DedupRowBytes: relayserver.DedupRowBytes,
		ChargedBytes: r.Charged(), Keys: []keyUsageJSON{}}
	for _, k := range r.Keys {
		out.Keys = append(out.Keys, keyUsageJSON{Fingerprint: fingerprintOf(k.Pubkey), Pubkey: k.Pubkey, Name: k.Enrolment.HostName,
			State: keyState(k.Enrolment), Queue: countsJSON(k.Queue), Sent: countsJSON(k.Sent), DedupRows: k.DedupRows,
			ChargedBytes: k.Charged()})
	}
	return out
}

// fingerprintOf is the key's fingerprint, or the key itself when it is not a host key (the relay's
// own key signs expiry notices; a store may hold keys of another form).
func fingerprintOf(pub string) string {
	if !mbx.ValidPublicKey(pub) {
		return pub
	}
	return mbx.Fingerprint(pub)
}

func writeUsage(out io.Writer, r relayserver.UsageReport) error {
	fmt.Fprintf(out, "queued %d items, %d bytes; %d dedup rows (%d bytes charged at %d each); %d bytes charged in all\n",
		r.Queued.Items, r.Queued.Bytes, r.DedupRows, r.DedupRows*relayserver.DedupRowBytes, relayserver.DedupRowBytes, r.Charged())
	if len(r.Keys) == 0 {
		return nil
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "KEY\tNAME\tSTATE\tQUEUED\tQUEUED BYTES\tSENT\tSENT BYTES\tDEDUP ROWS\tCHARGED BYTES\t")
	for _, k := range r.Keys {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t\n", fingerprintOf(k.Pubkey), k.Enrolment.HostName,
			keyState(k.Enrolment), k.Queue.Items, k.Queue.Bytes, k.Sent.Items, k.Sent.Bytes, k.DedupRows, k.Charged())
	}
	return tw.Flush()
}

// reclaimJSON is `relay reclaim --json`.
type reclaimJSON struct {
	Entry       string `json:"entry"` // "fingerprint 1a2b-…" or "client_id cli-7"
	By          string `json:"by"`    // "command" (no relay served the store) or "relay"
	ReclaimedAt string `json:"reclaimed_at"`
	Keys        int64  `json:"keys"`
	Items       int64  `json:"items"`
	Bytes       int64  `json:"bytes"`
	DedupRows   int64  `json:"dedup_rows"`
}

func newRelayReclaimCmd() *cobra.Command {
	var f denyFlags
	var asJSON bool
	var wait time.Duration
	cmd := &cobra.Command{
		Use:   "reclaim (--fingerprint FP | --client-id ID) [--json] [--wait D] [--store-dir DIR | --db URL]",
		Short: "Delete what the relay store holds for the keys a deny entry revoked",
		Long: `Delete what the relay store holds for the keys an active deny entry revoked: their queues,
the items they queued for other hosts, their dedup rows (tombstones), enc-key ads and allowlists.
Their enrolments stay (denied), and so do their sequence positions. Deny the key first:
'relay deny add --fingerprint FP'. A host whose deny entry is later removed enrols again and
starts with nothing queued; an item it re-sends is then taken as new.

While a relay serves the SQLite store, the command asks it (through the deny list) and waits up
to --wait for it to report; the relay logs "reclaimed the space of denied keys". Otherwise (no
relay serving, or a PostgreSQL database) the command does it itself and logs the same line on
stderr. The result stays on the deny entry ('relay deny list --json').`,
		Example: `  agentmbx relay reclaim --store-dir /var/lib/agentmbx-relay --fingerprint 1a2b-3c4d-5e6f-7a8b
  agentmbx relay reclaim --db "$MBX_RELAY_DB" --client-id cli-7 --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			kind, value, err := f.entry("reclaim")
			if err != nil {
				return usageErr("pass --fingerprint FP or --client-id ID", "relay reclaim: name exactly one deny entry")
			}
			log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
			out, err := reclaim(cmd.Context(), &f, kind, value, wait, log)
			if errors.Is(err, relayserver.ErrNotFound) {
				return hint(fmt.Errorf("relay reclaim: %w", err), "deny the key first: agentmbx relay deny add --%s %s", flagOf(kind), value)
			}
			if errors.Is(err, relayserver.ErrBadRequest) {
				return usageErr("", "relay reclaim: %v", err)
			}
			if err != nil {
				return fmt.Errorf("relay reclaim: %w", err)
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), out)
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "reclaimed %d items (%d bytes) and %d dedup rows of %d keys denied by %s (by the %s)\n",
				out.Items, out.Bytes, out.DedupRows, out.Keys, out.Entry, out.By)
			return err
		},
	}
	f.addEntry(cmd)
	f.addStore(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the result as one JSON object")
	cmd.Flags().DurationVar(&wait, "wait", 30*time.Second, "how long to wait for a serving relay to do it")
	return cmd
}

func flagOf(k relayserver.DenyKind) string {
	if k == relayserver.DenyClient {
		return "client-id"
	}
	return "fingerprint"
}

// reclaim asks for the reclaim and does it, or waits for the relay serving the SQLite store to.
func reclaim(ctx context.Context, f *denyFlags, kind relayserver.DenyKind, value string, wait time.Duration, log *slog.Logger) (reclaimJSON, error) {
	var st relayserver.Store
	if db := relayDB(f.db); db != "" && f.storeDir == "" {
		pg, err := pgstore.Open(ctx, db, &pgstore.Options{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			return reclaimJSON{}, relayStoreHint(err)
		}
		defer pg.Close()
		st = pg
	} else {
		dir, err := relayStoreDir(f.storeDir, "reclaim")
		if err != nil {
			return reclaimJSON{}, err
		}
		if _, err := os.Stat(filepath.Join(dir, sqlitestore.DBFile)); err != nil {
			return reclaimJSON{}, fmt.Errorf("no relay store in %s: %w", dir, err)
		}
		sq, err := sqlitestore.Open(ctx, dir, &sqlitestore.Options{LockWait: time.Millisecond})
		if errors.Is(err, relayserver.ErrLocked) {
			return reclaimByRelay(ctx, dir, kind, value, wait)
		}
		if err != nil {
			return reclaimJSON{}, relayStoreHint(err)
		}
		defer sq.Close()
		st = sq
	}
	now := time.Now()
	d, err := relayserver.RequestReclaim(ctx, st.(relayserver.DenyStore), kind, value, now)
	if err != nil {
		return reclaimJSON{}, err
	}
	keys, res, ok, err := relayserver.ApplyReclaim(ctx, st, d, now)
	if err != nil {
		return reclaimJSON{}, err
	}
	if !ok { // a relay sharing the database took it first: report what it did
		return waitReclaimed(ctx, st, d, 0)
	}
	log.Warn("reclaimed the space of denied keys", logkey.DenyEntry, d.String(), logkey.Revoked, len(keys),
		logkey.ReclaimedItems, res.Items, logkey.ReclaimedBytes, res.Bytes, logkey.DedupRows, res.DedupRows)
	return reclaimJSON{Entry: d.String(), By: "command", ReclaimedAt: mbx.ISOTime(now), Keys: res.Keys, Items: res.Items,
		Bytes: res.Bytes, DedupRows: res.DedupRows}, nil
}

// reclaimByRelay asks the relay serving the SQLite store in dir to reclaim, through the deny list,
// and waits for it to record the result.
func reclaimByRelay(ctx context.Context, dir string, kind relayserver.DenyKind, value string, wait time.Duration) (reclaimJSON, error) {
	df, err := sqlitestore.OpenDenyFile(ctx, dir)
	if err != nil {
		return reclaimJSON{}, err
	}
	defer df.Close()
	d, err := relayserver.RequestReclaim(ctx, df, kind, value, time.Now())
	if err != nil {
		return reclaimJSON{}, err
	}
	return waitReclaimed(ctx, df, d, wait)
}

// waitReclaimed polls the deny list until the reclaim d asked for is recorded, for up to wait.
func waitReclaimed(ctx context.Context, ds interface {
	DenyList(context.Context) ([]relayserver.DenyEntry, error)
}, d relayserver.DenyEntry, wait time.Duration) (reclaimJSON, error) {
	deadline := time.Now().Add(wait)
	for {
		l, err := ds.DenyList(ctx)
		if err != nil {
			return reclaimJSON{}, err
		}
		for _, e := range l {
			if e.Kind == d.Kind && e.Value == d.Value && !e.ReclaimedAt.Before(d.ReclaimAt) {
				r := e.Reclaimed
				return reclaimJSON{Entry: e.String(), By: "relay", ReclaimedAt: mbx.ISOTime(e.ReclaimedAt), Keys: r.Keys,
					Items: r.Items, Bytes: r.Bytes, DedupRows: r.DedupRows}, nil
			}
		}
		if !time.Now().Before(deadline) {
			return reclaimJSON{}, fmt.Errorf("asked the relay serving the store to reclaim for %s; it has not reported within %s "+
				"(it reads the deny list every %s): see its log, or run this again to wait for it", d, wait, relayserver.DefaultDenyPollEvery)
		}
		select {
		case <-ctx.Done():
			return reclaimJSON{}, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}
