// Command figures runs the benchmarks, bench commands and measuring tests behind the figures that
// README.md and docs/ quote, a number of times in turn, and writes docs/figures.md: the date, the
// machine, and for each figure the lowest and highest value over the runs. `make figures` runs it
// (FIGURES_RUNS=3 by default); it is too slow for CI, where its parsers are tested on sample output
// (figures_test.go) so that a changed benchmark or log line is caught there.
//
//	go run ./internal/figures [-runs 3] [-out docs/figures.md] [-only relay-bench,abuse]
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"
)

func main() {
	runs := flag.Int("runs", envInt("FIGURES_RUNS", 3), "runs of every command (FIGURES_RUNS)")
	out := flag.String("out", "docs/figures.md", "the file to write")
	only := flag.String("only", "", "comma-separated source names to run (default: all): "+strings.Join(sourceNames(), ","))
	goCmd := flag.String("go", envStr("GO", "go"), "the go command")
	raw := flag.String("raw", "", "a directory to keep each command's output in (SOURCE-RUN.txt)")
	flag.Parse()
	if err := run(*runs, *out, *only, *goCmd, *raw, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "figures:", err)
		os.Exit(1)
	}
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

func envStr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func sourceNames() []string {
	var names []string
	for _, s := range sources {
		names = append(names, s.name)
	}
	return names
}

// run measures every chosen source runs times (run 1 of each, then run 2 of each, so that a
// noisy minute on a shared machine spreads over the sources instead of landing on one) and writes
// the report to out. A failed command is reported in the file and makes run return an error.
func run(runs int, out, only, goCmd, raw string, log io.Writer) error {
	if runs < 1 || runs > 50 {
		return fmt.Errorf("-runs %d: give 1 to 50", runs)
	}
	if _, err := os.Stat("go.mod"); err != nil {
		return errors.New("run it from the module's root (make figures)")
	}
	chosen, err := choose(only)
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "agentmbx-figures-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	env := &runEnv{goCmd: goCmd, bin: filepath.Join(tmp, "agentmbx"), log: log}
	fmt.Fprintf(log, "figures: building %s\n", env.bin)
	if _, err := env.exec(context.Background(), goCmd, "build", "-o", env.bin, "./cmd/agentmbx"); err != nil {
		return fmt.Errorf("build: %w", err)
	}
	rep := &report{Runs: runs, Started: time.Now().UTC(), Machine: machine(goCmd), LoadStart: loadAvg()}
	results := make([]*sourceResult, len(chosen))
	for i, s := range chosen {
		results[i] = &sourceResult{src: s, cmd: s.command(env)}
	}
	failed := 0
	for r := 1; r <= runs; r++ {
		for _, res := range results {
			s := res.src
			if s.available != nil {
				if why := s.available(env); why != "" {
					res.absent = why
					continue
				}
			}
			fmt.Fprintf(log, "figures: run %d/%d: %s\n", r, runs, s.name)
			start := time.Now()
			output, err := s.measure(env)
			if raw != "" {
				if werr := os.WriteFile(filepath.Join(raw, fmt.Sprintf("%s-%d.txt", s.name, r)), output, 0o644); werr != nil {
					return werr
				}
			}
			var samples []sample
			if err == nil {
				samples, err = s.parse(output)
			}
			if err != nil {
				failed++
				res.failures = append(res.failures, fmt.Sprintf("run %d: %v\n%s", r, err, tailLines(output, 12)))
				fmt.Fprintf(log, "figures: %s failed: %v\n%s\n", s.name, err, tailLines(output, 30))
				continue
			}
			res.add(samples)
			fmt.Fprintf(log, "figures: %s: %d figures in %s\n", s.name, len(samples), time.Since(start).Round(time.Second))
		}
	}
	rep.Took = time.Since(rep.Started).Round(time.Second)
	rep.LoadEnd = loadAvg()
	rep.Results = results
	if err := os.WriteFile(out, []byte(rep.render()), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(log, "figures: wrote %s\n", out)
	if failed > 0 {
		return fmt.Errorf("%d measurement(s) failed; see %s", failed, out)
	}
	return nil
}

func choose(only string) ([]*source, error) {
	if only == "" {
		return sources, nil
	}
	var chosen []*source
	for _, name := range strings.Split(only, ",") {
		found := false
		for _, s := range sources {
			if s.name == strings.TrimSpace(name) {
				chosen, found = append(chosen, s), true
			}
		}
		if !found {
			return nil, fmt.Errorf("-only: no source %q (have %s)", name, strings.Join(sourceNames(), ", "))
		}
	}
	return chosen, nil
}

// runEnv is what the sources run with: the go command and the agentmbx binary built for the run.
type runEnv struct {
	goCmd, bin string
	log        io.Writer
}

// exec runs a command in the module's root and returns its standard output and error together.
func (e *runEnv) exec(ctx context.Context, name string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	err := cmd.Run()
	if err != nil {
		err = fmt.Errorf("%s: %w", strings.Join(append([]string{filepath.Base(name)}, args...), " "), err)
	}
	return buf.Bytes(), err
}

// machine describes this machine: CPU model, cores and the Go version the tests are built with.
func machine(goCmd string) string {
	model := runtime.GOARCH
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		model = cpuModel(string(b), model)
	}
	version := runtime.Version()
	if out, err := exec.Command(goCmd, "env", "GOVERSION").Output(); err == nil {
		version = strings.TrimSpace(string(out))
	}
	return fmt.Sprintf("%s, %d cores, %s/%s, %s", model, runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, version)
}

// cpuModel returns the first "model name" of a /proc/cpuinfo text, else def.
func cpuModel(cpuinfo, def string) string {
	for _, line := range strings.Split(cpuinfo, "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return def
}

// loadAvg is the 1-minute load average, or "" where /proc/loadavg is absent.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return ""
	}
	return f[0]
}

// tailLines returns the last n lines of b.
func tailLines(b []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
