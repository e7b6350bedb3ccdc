package relaybench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/agentmbx/agentmbx/mbx"
)

// Config is one benchmark run.
type Config struct {
	// Dir is where the stores go: each phase makes a fresh directory inside it and removes it
	// afterwards. "" uses a temporary directory. Point it at the production volume to measure
	// that disk.
	Dir string
	// Duration of each load phase (group commit, then one commit per item). Default 5 s.
	Duration time.Duration
	// Pushers is the number of concurrent pushing hosts. Default 64.
	Pushers int
	// Batch is the number of items per push, 1 to mbx.DefaultMaxBatch. Default 1.
	Batch int
	// WireBytes is the size of each item's wire bytes (at least what the envelope's id needs).
	// Default 100.
	WireBytes int
	// Progress, when set, is told what the run is doing every few hundred milliseconds.
	Progress func(Progress)
}

// Progress is where a run is.
type Progress struct {
	// Phase is "crypto", "fsync", "group-commit" or "commit-per-item".
	Phase   string
	Elapsed time.Duration
	Total   time.Duration
	Items   int64
}

// Result is what a run measured. CPU figures are of the whole process (pushers and relay share
// it, as in the figures), from getrusage; they are 0 where the platform does not say.
type Result struct {
	Pushers   int     `json:"pushers"`
	Batch     int     `json:"batch"`
	Seconds   float64 `json:"seconds"`
	WireBytes int     `json:"wire_bytes"`

	// With group commit (the relay's normal mode).
	Items          int64   `json:"items"`
	ItemsPerS      float64 `json:"items_per_s"`
	CPUUsPerItem   float64 `json:"cpu_us_per_item"`
	Commits        int64   `json:"commits"`
	CommitsPerS    float64 `json:"commits_per_s"`
	UnitsPerCommit float64 `json:"units_per_commit"`
	ItemsPerCommit float64 `json:"items_per_commit"`
	// DiskBytesPerItem is what the store's database grew by during the run (enrolments are
	// there before), over the items it then holds.
	DiskBytesPerItem float64 `json:"disk_bytes_per_item"`

	// The same load with one commit per push request.
	CommitPerItemItems        int64   `json:"commit_per_item_items"`
	CommitPerItemItemsPerS    float64 `json:"commit_per_item_items_per_s"`
	CommitPerItemCPUUsPerItem float64 `json:"commit_per_item_cpu_us_per_item"`
	// GroupCommitGain is items_per_s over commit_per_item_items_per_s.
	GroupCommitGain float64 `json:"group_commit_gain"`

	// The floor: the disk's raw fsync rate in Dir and the crypto a pushed item needs.
	FsyncPerS       float64 `json:"fsync_per_s"`
	Ed25519SignUs   float64 `json:"ed25519_sign_us"`
	Ed25519VerifyUs float64 `json:"ed25519_verify_us"`
	// FloorUsPerItem is the Ed25519 work of one item: the pusher signs the hop and the relay
	// verifies it once per push, the relay signs an accept statement per item.
	FloorUsPerItem float64 `json:"floor_us_per_item"`
	// FloorRatio is cpu_us_per_item over floor_us_per_item.
	FloorRatio float64 `json:"floor_ratio"`
}

func (c *Config) defaults() error {
	if c.Duration == 0 {
		c.Duration = 5 * time.Second
	}
	if c.Pushers == 0 {
		c.Pushers = 64
	}
	if c.Batch == 0 {
		c.Batch = 1
	}
	if c.WireBytes == 0 {
		c.WireBytes = 100
	}
	switch {
	case c.Duration < 100*time.Millisecond || c.Duration > time.Hour:
		return fmt.Errorf("relaybench: duration %s: 0.1 s to 1 h", c.Duration)
	case c.Pushers < 1 || c.Pushers > 4096:
		return fmt.Errorf("relaybench: %d pushers: 1 to 4096", c.Pushers)
	case c.Batch < 1 || c.Batch > mbx.DefaultMaxBatch:
		return fmt.Errorf("relaybench: batch %d: 1 to %d", c.Batch, mbx.DefaultMaxBatch)
	case c.WireBytes < 1 || c.WireBytes > int(mbx.DefaultMaxItemBytes):
		return fmt.Errorf("relaybench: wire bytes %d: 1 to %d", c.WireBytes, mbx.DefaultMaxItemBytes)
	}
	return nil
}

// Run runs the benchmark: the Ed25519 costs, the raw fsync rate of the directory, then the load
// with group commit and with one commit per item, each on a fresh store. It removes everything
// it made, also when it fails or ctx ends.
func Run(ctx context.Context, cfg Config) (Result, error) {
	var res Result
	if err := cfg.defaults(); err != nil {
		return res, err
	}
	dir, cleanup, err := workDir(cfg.Dir)
	if err != nil {
		return res, err
	}
	defer cleanup()
	report := func(phase string, total time.Duration) func(time.Duration, int64) {
		if cfg.Progress == nil {
			return nil
		}
		return func(el time.Duration, items int64) {
			cfg.Progress(Progress{Phase: phase, Elapsed: el, Total: total, Items: items})
		}
	}
	res.Pushers, res.Batch, res.Seconds, res.WireBytes = cfg.Pushers, cfg.Batch, cfg.Duration.Seconds(), cfg.WireBytes

	probe := min(max(cfg.Duration/4, 250*time.Millisecond), 2*time.Second)
	if p := report("crypto", probe); p != nil {
		p(0, 0)
	}
	sign, verify, err := ed25519Costs(probe / 2)
	if err != nil {
		return res, fmt.Errorf("relaybench: %w", err)
	}
	res.Ed25519SignUs, res.Ed25519VerifyUs = us(sign), us(verify)
	if p := report("fsync", probe); p != nil {
		p(0, 0)
	}
	if res.FsyncPerS, err = fsyncRate(dir, probe); err != nil {
		return res, fmt.Errorf("relaybench: %w", err)
	}

	g, err := runLoad(ctx, cfg, filepath.Join(dir, "group-commit"), 0, report("group-commit", cfg.Duration))
	if err != nil {
		return res, fmt.Errorf("relaybench: group commit: %w", err)
	}
	one, err := runLoad(ctx, cfg, filepath.Join(dir, "commit-per-item"), 1, report("commit-per-item", cfg.Duration))
	if err != nil {
		return res, fmt.Errorf("relaybench: commit per item: %w", err)
	}
	if g.items == 0 || one.items == 0 {
		return res, fmt.Errorf("relaybench: no push completed in %s", cfg.Duration)
	}
	res.fill(g, one)
	return res, nil
}

// fill derives the result's figures from the two load phases.
func (res *Result) fill(g, one phase) {
	res.Items = g.items
	res.ItemsPerS = float64(g.items) / g.elapsed.Seconds()
	res.CPUUsPerItem = us(g.cpu) / float64(g.items)
	res.Commits = g.commits
	res.CommitsPerS = float64(g.commits) / g.elapsed.Seconds()
	if g.commits > 0 {
		res.UnitsPerCommit = float64(g.units) / float64(g.commits)
		res.ItemsPerCommit = float64(g.items) / float64(g.commits)
	}
	res.DiskBytesPerItem = float64(g.diskBytes) / float64(g.items)
	res.CommitPerItemItems = one.items
	res.CommitPerItemItemsPerS = float64(one.items) / one.elapsed.Seconds()
	res.CommitPerItemCPUUsPerItem = us(one.cpu) / float64(one.items)
	res.GroupCommitGain = res.ItemsPerS / res.CommitPerItemItemsPerS
	res.FloorUsPerItem = res.Ed25519SignUs + (res.Ed25519SignUs+res.Ed25519VerifyUs)/float64(res.Batch)
	if res.CPUUsPerItem > 0 {
		res.FloorRatio = res.CPUUsPerItem / res.FloorUsPerItem
	}
}

// workDir makes the run's own directory: a temporary one, or a fresh one inside dir. cleanup
// removes it and nothing else.
func workDir(dir string) (string, func(), error) {
	if dir != "" {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return "", nil, fmt.Errorf("relaybench: %w", err)
		}
	}
	d, err := os.MkdirTemp(dir, "agentmbx-relay-bench-")
	if err != nil {
		return "", nil, fmt.Errorf("relaybench: %w", err)
	}
	return d, func() { _ = os.RemoveAll(d) }, nil
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
