package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentmbx/agentmbx/relayserver"
	"github.com/agentmbx/agentmbx/relayserver/relaybench"
)

// newRelayBenchCmd is `agentmbx relay bench`: the relay's throughput on this machine and disk.
func newRelayBenchCmd() *cobra.Command {
	var (
		dir       string
		seconds   float64
		pushers   int
		batch     int
		wireBytes int
		asJSON    bool
	)
	cmd := &cobra.Command{
		Use:   "bench [--dir DIR] [--seconds N] [--pushers 64] [--batch 1|200] [--json]",
		Short: "Measure how many items a relay on this machine and disk can take",
		Long: `Run a relay in this process on a fresh store in DIR (default a temporary directory; pass the
production volume to measure its disk), serve it over HTTP on 127.0.0.1, enrol synthetic hosts and
push signed items from concurrent pushers, each answered only after its fsynced commit, as in
production. The load runs twice, N seconds each: with group commit (the relay's normal mode) and
with one commit per push. It also measures the directory's raw fsync rate and Ed25519 sign and
verify times, and prints how far the CPU per item is from the crypto floor (the hop signature and
its check per push, an accept signature per item). CPU figures are of the whole process, pushers
included. Everything the run writes is removed at the end.`,
		Example: `  agentmbx relay bench
  agentmbx relay bench --dir /var/lib/agentmbx-relay --seconds 10
  agentmbx relay bench --batch 200 --pushers 4 --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if seconds <= 0 || seconds > 3600 {
				return usageErr("", "--seconds %v: give 0.1 to 3600", seconds)
			}
			if pushers < 1 || batch < 1 || wireBytes < 1 {
				return usageErr("", "--pushers, --batch and --wire-bytes take positive numbers")
			}
			cfg := relaybench.Config{Dir: dir, Duration: time.Duration(seconds * float64(time.Second)),
				Pushers: pushers, Batch: batch, WireBytes: wireBytes}
			if f, ok := cmd.ErrOrStderr().(*os.File); ok && isTerminal(f) {
				cfg.Progress = progressLine(f)
				defer fmt.Fprint(f, "\r\033[K")
			}
			relayserver.TuneGC(os.Getenv) // the garbage collector as relay serve sets it
			res, err := relaybench.Run(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				return enc.Encode(res)
			}
			return printBench(cmd.OutOrStdout(), res)
		},
	}
	f := cmd.Flags()
	f.StringVar(&dir, "dir", "", "directory for the benchmark's stores (default: a temporary directory)")
	f.Float64Var(&seconds, "seconds", 5, "seconds of load in each of the two runs")
	f.IntVar(&pushers, "pushers", 64, "concurrent pushing hosts")
	f.IntVar(&batch, "batch", 1, "items per push (1 to 200)")
	f.IntVar(&wireBytes, "wire-bytes", 100, "wire bytes of each item")
	f.BoolVar(&asJSON, "json", false, "print one JSON object")
	return cmd
}

// progressLine rewrites one line on the terminal f with where the run is.
func progressLine(f *os.File) func(relaybench.Progress) {
	return func(p relaybench.Progress) {
		if p.Items == 0 {
			fmt.Fprintf(f, "\r\033[K%s…", p.Phase)
			return
		}
		fmt.Fprintf(f, "\r\033[K%s: %.1f/%.0f s, %d items, %.0f items/s", p.Phase,
			p.Elapsed.Seconds(), p.Total.Seconds(), p.Items, float64(p.Items)/p.Elapsed.Seconds())
	}
}

// printBench prints a result for people.
func printBench(w io.Writer, r relaybench.Result) error {
	_, err := fmt.Fprintf(w, `relay bench: %d pushers, %d item(s) per push, %d wire bytes per item, %.1f s per run
group commit:     %8.0f items/s  %6.1f cpu-µs/item  %7.0f commits/s  %.1f pushes/commit (%.1f items/commit)
commit per push:  %8.0f items/s  %6.1f cpu-µs/item  (group commit takes %.1f× as many)
disk:             %8.0f fsync/s raw in the directory, %.0f bytes stored per item
ed25519:          sign %.1f µs, verify %.1f µs; floor %.1f µs/item, the relay runs at %.2f× the floor
`, r.Pushers, r.Batch, r.WireBytes, r.Seconds,
		r.ItemsPerS, r.CPUUsPerItem, r.CommitsPerS, r.UnitsPerCommit, r.ItemsPerCommit,
		r.CommitPerItemItemsPerS, r.CommitPerItemCPUUsPerItem, r.GroupCommitGain,
		r.FsyncPerS, r.DiskBytesPerItem,
		r.Ed25519SignUs, r.Ed25519VerifyUs, r.FloorUsPerItem, r.FloorRatio)
	return err
}
