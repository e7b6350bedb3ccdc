package main

// The list tables of the host commands (inbox, outbox, sent, thread, peers, agents, quarantine):
// on a terminal a lipgloss table fitted to its width, elsewhere tab-separated plain text.

import (
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/charmbracelet/lipgloss"
	lgtable "github.com/charmbracelet/lipgloss/table"
	"github.com/charmbracelet/x/ansi"
	"github.com/charmbracelet/x/term"
	"github.com/muesli/termenv"

	"github.com/agentmbx/agentmbx/internal/termtext"
)

const (
	// cellMax is where a cell other than the one shown whole is cut.
	cellMax = 60
	// wholeMin is the narrowest the whole column is wrapped to, however narrow the terminal.
	wholeMin = 24
	// defaultWidth is the width assumed for a terminal that does not say its own.
	defaultWidth = 100
)

// tbl is a table to print. Whole is the index of the column shown whole (an error text, a
// reason), or -1: on a terminal its text wraps to fit the width; piped it stays on its line.
// Other cells are cut at cellMax characters. Empty cells show as "-". Spare lists columns a
// terminal too narrow for the whole column (wholeMin) leaves out, in that order, until it fits.
type tbl struct {
	header []string
	rows   [][]string
	whole  int
	spare  []int
}

// tableOut is where a table goes: a terminal of some width (in colour unless NO_COLOR is set
// or TERM=dumb), or not a terminal.
type tableOut struct {
	tty   bool
	width int
	color bool
}

// tableOutOf looks at w: a terminal when it is one (os.Stdout usually).
func tableOutOf(w any) tableOut {
	f, ok := w.(*os.File)
	if !ok || !isTerminal(f) {
		return tableOut{}
	}
	width, _, err := term.GetSize(f.Fd())
	if err != nil {
		width = 0
	}
	return terminalOut(width, os.LookupEnv)
}

// terminalOut is a terminal of width columns (0: unknown; then $COLUMNS, else defaultWidth),
// in colour unless NO_COLOR is set (https://no-color.org) or TERM=dumb.
func terminalOut(width int, env func(string) (string, bool)) tableOut {
	if width <= 0 {
		s, _ := env("COLUMNS")
		if n, err := strconv.Atoi(s); err == nil && n > 0 {
			width = n
		} else {
			width = defaultWidth
		}
	}
	_, noColor := env("NO_COLOR")
	t, _ := env("TERM")
	return tableOut{tty: true, width: width, color: !noColor && t != "dumb"}
}

// table writes rows under a header, no column shown whole.
func table(w io.Writer, header []string, rows [][]string) error {
	return tbl{header: header, rows: rows, whole: -1}.write(w)
}

// write prints the table as w calls for.
func (t tbl) write(w io.Writer) error { return t.render(w, tableOutOf(w)) }

// render prints the table for out.
func (t tbl) render(w io.Writer, out tableOut) error {
	cells := t.cells()
	if !out.tty {
		return plainTable(w, t.header, cells)
	}
	_, err := io.WriteString(w, t.styled(cells, out))
	return err
}

// cells are the rows made fit for a table: hidden runes (controls, bidi overrides) escaped on one
// line (termtext.Line), cut where they may be, "-" for empty.
func (t tbl) cells() [][]string {
	out := make([][]string, len(t.rows))
	for i, r := range t.rows {
		out[i] = make([]string, len(r))
		for j, c := range r {
			c = termtext.Line(c)
			if j != t.whole {
				c = cutRunes(c, cellMax)
			}
			if c == "" {
				c = "-"
			}
			out[i][j] = c
		}
	}
	return out
}

// plainTable writes tab-separated lines, the header first, with no escape codes: what scripts
// and agents read (cells hold no tab or newline: cells escaped them).
func plainTable(w io.Writer, header []string, rows [][]string) error {
	var b strings.Builder
	b.WriteString(strings.Join(header, "\t"))
	b.WriteByte('\n')
	for _, r := range rows {
		b.WriteString(strings.Join(r, "\t"))
		b.WriteByte('\n')
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// styled renders a lipgloss table: a bold header over a rule, columns two spaces apart, the
// whole column wrapped so that the table fits out.width; when it still does not fit, lipgloss
// shrinks the other columns, wrapping them too.
func (t tbl) styled(cells [][]string, out tableOut) string {
	const gap = 2
	t, cells = t.fit(cells, out.width, gap)
	widths := colWidths(t.header, cells)
	total := tableWidth(widths, gap)
	if total > out.width && t.whole >= 0 && t.whole < len(widths) {
		room := max(out.width-(total-widths[t.whole]), wholeMin)
		for _, r := range cells {
			if t.whole < len(r) {
				r[t.whole] = ansi.Wrap(r[t.whole], room, " ,;:/")
			}
		}
		total -= widths[t.whole] - min(room, widths[t.whole])
	}
	re := lipgloss.NewRenderer(io.Discard)
	re.SetColorProfile(termenv.Ascii)
	if out.color {
		re.SetColorProfile(termenv.ANSI)
	}
	last := len(t.header) - 1
	head := re.NewStyle().Bold(true).Foreground(lipgloss.Color("6"))
	tb := lgtable.New().Headers(t.header...).Rows(cells...).
		Border(lipgloss.NormalBorder()).BorderStyle(re.NewStyle().Faint(true)).
		BorderTop(false).BorderBottom(false).BorderLeft(false).BorderRight(false).BorderColumn(false).
		StyleFunc(func(row, col int) lipgloss.Style {
			s := re.NewStyle()
			if row == lgtable.HeaderRow {
				s = head
			}
			if col < last {
				s = s.PaddingRight(gap)
			}
			return s
		})
	if total > out.width {
		tb = tb.Width(out.width)
	}
	lines := strings.Split(tb.Render(), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " ")
	}
	return strings.Join(lines, "\n") + "\n"
}

// fit leaves out the spare columns, in order, while the others and the whole column at wholeMin
// do not fit width.
func (t tbl) fit(cells [][]string, width, gap int) (tbl, [][]string) {
	if t.whole < 0 || t.whole >= len(t.header) {
		return t, cells
	}
	keep := make([]bool, len(t.header))
	for i := range keep {
		keep[i] = true
	}
	widths := colWidths(t.header, cells)
	need := func() int {
		n, cols := 0, 0
		for i, w := range widths {
			if !keep[i] {
				continue
			}
			if i == t.whole {
				w = min(w, wholeMin)
			}
			n, cols = n+w, cols+1
		}
		return n + gap*(cols-1)
	}
	for _, c := range t.spare {
		if need() <= width {
			break
		}
		keep[c] = false
	}
	pick := func(r []string) []string {
		var out []string
		for i, c := range r {
			if i >= len(keep) || keep[i] {
				out = append(out, c)
			}
		}
		return out
	}
	out := tbl{header: pick(t.header), whole: t.whole}
	for i := 0; i < t.whole; i++ {
		if !keep[i] {
			out.whole--
		}
	}
	picked := make([][]string, len(cells))
	for i, r := range cells {
		picked[i] = pick(r)
	}
	return out, picked
}

// tableWidth is the width of columns of widths, gap apart.
func tableWidth(widths []int, gap int) int {
	total := gap * (len(widths) - 1)
	for _, n := range widths {
		total += n
	}
	return total
}

// colWidths is the display width of each column: its widest line.
func colWidths(header []string, rows [][]string) []int {
	w := make([]int, len(header))
	for i, h := range header {
		w[i] = ansi.StringWidth(h)
	}
	for _, r := range rows {
		for i, c := range r {
			if i < len(w) {
				w[i] = max(w[i], ansi.StringWidth(c))
			}
		}
	}
	return w
}

// cutRunes keeps s to at most n characters, the last one "…" when it cut.
func cutRunes(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}
