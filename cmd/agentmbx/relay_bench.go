package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
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
		parked    int
		rate      float64
		wait      float64
		db        string
		replicas  int
		heapProf  string
		standard  bool
		restart   bool
	)
	cmd := &cobra.Command{
		Use:   "bench [--dir DIR] [--seconds N] [--pushers 64] [--batch 1|200] [--json] | --parked N [--rate R] [--db URL --replicas 2]",
		Short: "Measure how many items a relay on this machine and disk can take, or what parked polls cost",
		Long: `Run a relay in this process on a fresh store in DIR (default a temporary directory; pass the
production volume to measure its disk), serve it over HTTP on 127.0.0.1, enrol synthetic hosts and
push signed items from concurrent pushers, each answered only after its fsynced commit, as in
production. The load runs twice, N seconds each: with group commit (the relay's normal mode) and
with one commit per push. It also measures the directory's raw fsync rate and Ed25519 sign and
verify times, and prints how far the CPU per item is from the crypto floor (the hop signature and
its check per push, an accept signature per item). CPU figures are of the whole process, pushers
included. Everything the run writes is removed at the end.

With --parked N it measures long polls instead: it enrols N synthetic hosts, serves a relay on
127.0.0.1 and parks one real long poll per host from load processes of its own (this binary run
again, each holding at most 4,000 polls from its own loopback source address 127.0.0.x, each
raising its open-file limit to the hard limit). Once all N are parked it reports the relay
process's memory per parked poll (RSS and Go heap, after a forced collection) and its CPU over an
idle window of --seconds, then pushes --rate items per second to random parked hosts for
--seconds and reports how long each took from the push's answer to its arrival in the parked
poll (wake_p50_ms, wake_p99_ms). The relay process needs an open-file limit of N plus 512.
With --db URL (a PostgreSQL database the bench may write; use one of its own) the relays share it,
and with --replicas 2 polls park on one replica while pushes alternate between the two: the
pushes to the other one are reported as cross_wake_*, woken through the database's
notifications.`,
		Example: `  agentmbx relay bench
  agentmbx relay bench --dir /var/lib/agentmbx-relay --seconds 10
  agentmbx relay bench --batch 200 --pushers 4 --json
  agentmbx relay bench --parked 10000 --json
  agentmbx relay bench --parked 2000 --db postgres://localhost/bench --replicas 2`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if seconds <= 0 || seconds > 3600 {
				return usageErr("", "--seconds %v: give 0.1 to 3600", seconds)
			}
			if parked != 0 || db != "" || replicas != 1 {
				return runParkedBench(cmd, relaybench.ParkedConfig{Parked: parked, Rate: rate, DB: db, Replicas: replicas,
					Dir: dir, Duration: time.Duration(seconds * float64(time.Second)),
					Wait: time.Duration(wait * float64(time.Second)), HeapProfile: heapProf, Standard: standard, Restart: restart}, asJSON)
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
	f.IntVar(&parked, "parked", 0, "measure N parked long polls instead of pushes")
	f.Float64Var(&rate, "rate", 20, "with --parked: pushes per second to random parked hosts")
	f.Float64Var(&wait, "wait", 0, "with --parked: the wait each poll asks for, seconds (0: longer than the run)")
	f.StringVar(&db, "db", "", "with --parked: a PostgreSQL URL the relays share (a database of its own)")
	f.IntVar(&replicas, "replicas", 1, "with --parked and --db: 2 parks on one replica and pushes to both")
	f.BoolVar(&restart, "restart", false, "with --parked: then restart the relay and measure how the hosts come back")
	f.StringVar(&heapProf, "heap-profile", "", "with --parked: write the relay process's heap profile there once all are parked")
	_ = f.MarkHidden("heap-profile")
	f.BoolVar(&standard, "standard-polls", false, "with --parked: park polls the standard way (a handler goroutine each), to compare")
	_ = f.MarkHidden("standard-polls")
	return cmd
}

// newRelayBenchLoadCmd is the hidden load process of `relay bench --parked`: the bench runs this
// binary again with it, feeds it its hosts on stdin and reads its wake times from stdout.
func newRelayBenchLoadCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "bench-load",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if os.Getenv(relaybench.EnvLoader) == "" {
				return usageErr("", "bench-load is run by relay bench --parked, not by hand")
			}
			return relaybench.RunLoader(cmd.Context(), cmd.InOrStdin(), cmd.OutOrStdout())
		},
	}
}

// runParkedBench runs `relay bench --parked`.
func runParkedBench(cmd *cobra.Command, cfg relaybench.ParkedConfig, asJSON bool) error {
	if cfg.Parked < 1 {
		return usageErr("", "--parked %d: give the number of polls to park (--db and --replicas go with it)", cfg.Parked)
	}
	if cfg.Replicas == 2 && cfg.DB == "" {
		return usageErr("", "--replicas 2 needs --db URL: the replicas share a PostgreSQL database")
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("relay bench: %w", err)
	}
	cfg.Loader = func() *exec.Cmd {
		c := exec.Command(exe, "relay", "bench-load")
		c.Env = append(os.Environ(), relaybench.EnvLoader+"=1")
		return c
	}
	if f, ok := cmd.ErrOrStderr().(*os.File); ok && isTerminal(f) {
		cfg.Progress = func(s string) { fmt.Fprintf(f, "\r\033[K%s…", s) }
		defer fmt.Fprint(f, "\r\033[K")
	}
	relayserver.TuneGC(os.Getenv) // the garbage collector as relay serve sets it
	res, err := relaybench.RunParked(cmd.Context(), cfg)
	if err != nil {
		return err
	}
	if asJSON {
		return json.NewEncoder(cmd.OutOrStdout()).Encode(res)
	}
	w := cmd.OutOrStdout()
	fmt.Fprintf(w, "relay bench: %d polls parked (%s) on %d replica(s) (%s) in %.1f s, from %d load process(es)\n",
		res.Parked, res.Mode, res.Replicas, res.Store, res.ParkSeconds, res.Loaders)
	fmt.Fprintf(w, "memory:  %.1f KiB RSS per parked poll (Go heap %.1f KiB, stacks %.1f KiB, %.2f goroutines); %.0f MiB RSS in all\n",
		res.RSSBytesPerParked/1024, (res.HeapBytesPerParked-res.StackBytesPerParked)/1024, res.StackBytesPerParked/1024,
		res.GoroutinesPerParked, float64(res.RSSBytesIdle)/(1<<20))
	fmt.Fprintf(w, "idle:    %.2f%% CPU over %.1f s\n", res.CPUPctIdle, res.IdleSeconds)
	fmt.Fprintf(w, "wake:    %d pushes, p50 %.2f ms, p99 %.2f ms, max %.2f ms\n", res.Pushes, res.WakeP50Ms, res.WakeP99Ms, res.WakeMaxMs)
	if res.RestartAllS > 0 {
		fmt.Fprintf(w, "restart: back 10%% after %.1f s, 50%% %.1f s, 90%% %.1f s, all %.1f s; at most %d in one second\n",
			res.RestartP10S, res.RestartP50S, res.RestartP90S, res.RestartAllS, res.RestartPeakPerS)
	}
	if res.CrossPushes > 0 {
		fmt.Fprintf(w, "cross:   %d pushes to the other replica, p50 %.2f ms, p99 %.2f ms, max %.2f ms\n",
			res.CrossPushes, res.CrossWakeP50Ms, res.CrossWakeP99Ms, res.CrossWakeMaxMs)
	}
	return nil
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
