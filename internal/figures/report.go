package main

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// fig is one figure's values over the runs.
type fig struct {
	label, unit string
	values      []float64
}

// sourceResult is what one source measured over the runs.
type sourceResult struct {
	src      *source
	cmd      string
	order    []*fig
	figs     map[string]*fig
	failures []string
	absent   string // why it did not run
}

func (r *sourceResult) add(samples []sample) {
	if r.figs == nil {
		r.figs = map[string]*fig{}
	}
	for _, s := range samples {
		k := s.Label + "\x00" + s.Unit
		f := r.figs[k]
		if f == nil {
			f = &fig{label: s.Label, unit: s.Unit}
			r.figs[k] = f
			r.order = append(r.order, f)
		}
		f.values = append(f.values, s.Value)
	}
}

type report struct {
	Runs               int
	Started            time.Time
	Took               time.Duration
	Machine            string
	LoadStart, LoadEnd string
	Results            []*sourceResult
}

func (rep *report) render() string {
	var b strings.Builder
	b.WriteString("# Figures from a run\n\n")
	b.WriteString("`make figures` wrote this file (the program is internal/figures); re-run it rather than edit\n")
	fmt.Fprintf(&b, "it. Each command below ran %d times, one run of every command after another; a figure is\n", rep.Runs)
	b.WriteString("the lowest–highest of its values over those runs, and \"runs\" says how many runs gave it.\n\n")
	fmt.Fprintf(&b, "- Date: %s UTC (%s in all)\n", rep.Started.Format("2006-01-02 15:04"), rep.Took)
	fmt.Fprintf(&b, "- Machine: %s\n", rep.Machine)
	if rep.LoadStart != "" {
		fmt.Fprintf(&b, "- Load average (1 minute): %s at the start, %s at the end\n", rep.LoadStart, rep.LoadEnd)
	}
	for _, r := range rep.Results {
		fmt.Fprintf(&b, "\n## %s\n\n`%s`\n\nQuoted in: %s.\n\n", r.src.title, r.cmd, r.src.backs)
		if r.absent != "" {
			fmt.Fprintf(&b, "Not measured: %s.\n", r.absent)
			continue
		}
		if len(r.order) > 0 {
			b.WriteString("| figure | range | unit | runs |\n|---|---|---|---|\n")
			for _, f := range r.order {
				fmt.Fprintf(&b, "| %s | %s | %s | %d |\n", f.label, valueRange(f.values), f.unit, len(f.values))
			}
		}
		for _, f := range r.failures {
			fmt.Fprintf(&b, "\nFailed, %s\n", indentBlock(f))
		}
	}
	return b.String()
}

// indentBlock puts a failure's first line as text and the rest (the output's tail) in a block.
func indentBlock(s string) string {
	first, rest, _ := strings.Cut(s, "\n")
	if rest == "" {
		return first + "\n"
	}
	return first + "\n\n```text\n" + rest + "\n```\n"
}

// valueRange is "lo–hi" of vs, or one value when they print the same. Whole numbers print as
// such only when every value is one (16–28.2 would read as a count next to a measure).
func valueRange(vs []float64) string {
	format := fmtNum
	for _, v := range vs {
		if v != math.Trunc(v) {
			format = fmtFrac
		}
	}
	lo, hi := format(slices.Min(vs)), format(slices.Max(vs))
	if lo == hi {
		return lo
	}
	return lo + "–" + hi
}

// fmtNum prints v with about three significant digits, whole numbers with thousands separators.
func fmtNum(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return commas(int64(v))
	}
	return fmtFrac(v)
}

// fmtFrac prints v with about three significant digits (a whole number too: 16.0).
func fmtFrac(v float64) string {
	a := math.Abs(v)
	switch {
	case v == 0:
		return "0"
	case a >= 1000:
		return commas(int64(math.Round(v)))
	case a >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case a >= 1:
		return strconv.FormatFloat(v, 'f', 2, 64)
	default:
		return strconv.FormatFloat(v, 'f', 2-int(math.Floor(math.Log10(a))), 64)
	}
}

// commas prints n with a comma every three digits.
func commas(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}
