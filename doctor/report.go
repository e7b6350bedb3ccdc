package doctor

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/charmbracelet/lipgloss"

	"github.com/agentmbx/agentmbx/internal/termtext"
)

// Status is the outcome of one check.
type Status string

// The statuses, from good to bad; Info is neither.
const (
	OK   Status = "ok"
	Info Status = "info"
	Warn Status = "warn"
	Fail Status = "fail"
)

// Check is one line of the report. Fix is a command (or a short instruction) that fixes it, or "".
type Check struct {
	ID      string `json:"id"`
	Status  Status `json:"status"`
	Summary string `json:"summary"`
	Detail  string `json:"detail"`
	Fix     string `json:"fix"`
}

// Report is every check of one run. OK is false when any check failed.
type Report struct {
	OK     bool    `json:"ok"`
	Checks []Check `json:"checks"`
}

func (r *Report) add(c Check) {
	if c.Status == Fail {
		r.OK = false
	}
	r.Checks = append(r.Checks, c)
}

// Count returns how many checks have status s.
func (r Report) Count(s Status) int {
	n := 0
	for _, c := range r.Checks {
		if c.Status == s {
			n++
		}
	}
	return n
}

// WriteJSON writes the report as {"ok": bool, "checks": [{id, status, summary, detail, fix}]}.
func (r Report) WriteJSON(w io.Writer) error {
	if r.Checks == nil {
		r.Checks = []Check{}
	}
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WritePlain writes one line per check ("ok    id  summary"), its detail and "fix:" lines
// indented below it, and a closing count: for pipes, logs and NO_COLOR.
func (r Report) WritePlain(w io.Writer) error {
	width := idWidth(r.Checks)
	for _, c := range r.Checks {
		fmt.Fprintf(w, "%-4s  %-*s  %s\n", c.Status, width, c.ID, oneLine(c.Summary))
		for _, d := range detailLines(c.Detail) {
			fmt.Fprintf(w, "      %-*s  %s\n", width, "", d)
		}
		if c.Fix != "" {
			fmt.Fprintf(w, "      %-*s  fix: %s\n", width, "", oneLine(c.Fix))
		}
	}
	_, err := fmt.Fprintln(w, r.tally())
	return err
}

// WriteStyled writes the report for a terminal: a coloured mark (✔ ✗ ! ·) per check, the
// detail dimmed, the fix in bold.
func (r Report) WriteStyled(w io.Writer) error {
	re := lipgloss.NewRenderer(w)
	marks := map[Status]lipgloss.Style{
		OK:   re.NewStyle().Foreground(lipgloss.Color("2")).SetString("✔"),
		Info: re.NewStyle().Foreground(lipgloss.Color("4")).SetString("·"),
		Warn: re.NewStyle().Foreground(lipgloss.Color("3")).Bold(true).SetString("!"),
		Fail: re.NewStyle().Foreground(lipgloss.Color("1")).Bold(true).SetString("✗"),
	}
	width := idWidth(r.Checks)
	id := re.NewStyle().Width(width).Bold(true)
	dim := re.NewStyle().Faint(true)
	fix := re.NewStyle().Bold(true)
	pad := strings.Repeat(" ", width+4)
	for _, c := range r.Checks {
		fmt.Fprintf(w, "%s %s  %s\n", marks[c.Status].String(), id.Render(c.ID), oneLine(c.Summary))
		for _, d := range detailLines(c.Detail) {
			fmt.Fprintf(w, "%s%s\n", pad, dim.Render(d))
		}
		if c.Fix != "" {
			fmt.Fprintf(w, "%s%s %s\n", pad, dim.Render("fix:"), fix.Render(oneLine(c.Fix)))
		}
	}
	tally := re.NewStyle().Bold(true)
	if !r.OK {
		tally = tally.Foreground(lipgloss.Color("1"))
	}
	_, err := fmt.Fprintln(w, tally.Render(r.tally()))
	return err
}

func (r Report) tally() string {
	return fmt.Sprintf("doctor: %d ok, %d warn, %d fail, %d info", r.Count(OK), r.Count(Warn), r.Count(Fail), r.Count(Info))
}

func idWidth(cs []Check) int {
	w := 0
	for _, c := range cs {
		w = max(w, len(c.ID))
	}
	return min(w, 24)
}

// detailLines splits a detail into its lines, each made safe for a terminal.
func detailLines(d string) []string {
	if strings.TrimSpace(d) == "" {
		return nil
	}
	var out []string
	for _, l := range strings.Split(strings.TrimRight(d, "\n"), "\n") {
		out = append(out, oneLine(l))
	}
	return out
}

// oneLine makes text from the store, a relay or a peer safe to print on one terminal line:
// controls (escape sequences, newlines) and bidi overrides are escaped (internal/termtext).
func oneLine(s string) string { return termtext.Line(s) }
