package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/charmbracelet/x/ansi"
)

var longErr = "relay push: Post \"https://relay.example:8443/v1/push\": dial tcp 203.0.113.7:8443: connect: connection refused (the relay is stopped or unreachable)"

func sampleTable() tbl {
	return tbl{
		header: []string{"MSG_ID", "HOST", "STATE", "LAST_ERROR"},
		rows: [][]string{
			{"01JA0000000000000000000000", "beta", "pending", longErr},
			{"01JA0000000000000000000001", "gamma\nline", "done", ""},
		},
		whole: 3,
	}
}

func render(t *testing.T, tb tbl, out tableOut) string {
	t.Helper()
	var b bytes.Buffer
	if err := tb.render(&b, out); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// Piped (not a terminal): tab-separated plain text, no escape codes, the whole column on its line,
// control characters escaped (internal/termtext), "-" for empty, other cells cut at 60 characters.
func TestTablePiped(t *testing.T) {
	tb := sampleTable()
	tb.rows = append(tb.rows, []string{"01JA0000000000000000000002", strings.Repeat("h", 70), "pending", "x"})
	got := render(t, tb, tableOut{})
	lines := strings.Split(strings.TrimSuffix(got, "\n"), "\n")
	if len(lines) != 4 || lines[0] != "MSG_ID\tHOST\tSTATE\tLAST_ERROR" || !strings.HasSuffix(lines[1], "\t"+longErr) {
		t.Fatalf("piped table:\n%s", got)
	}
	if !strings.Contains(lines[2], `gamma\x0aline`) || !strings.HasSuffix(lines[2], "\tdone\t-") {
		t.Fatalf("row 2 = %q", lines[2])
	}
	if !strings.Contains(lines[3], strings.Repeat("h", 59)+"…\tpending") {
		t.Fatalf("row 3 = %q, want the host cut at 60 characters", lines[3])
	}
	if strings.Contains(got, "\x1b") {
		t.Fatalf("escape codes in piped output: %q", got)
	}
}

// On a terminal the table fits the width: the whole column wraps (every character of the
// error still there, nothing cut) and the other columns keep their lines; wide enough, a row is
// one line. Narrower than the other columns allow, lipgloss shrinks them too, still within the
// width.
func TestTableTerminalWrapsToWidth(t *testing.T) {
	for _, width := range []int{80, 100, 200, 50} {
		got := render(t, sampleTable(), tableOut{tty: true, width: width})
		lines := strings.Split(strings.TrimSuffix(got, "\n"), "\n")
		for _, l := range lines {
			if w := ansi.StringWidth(l); w > width {
				t.Fatalf("width %d: line of %d columns %q\n%s", width, w, l, got)
			}
		}
		if strings.Contains(got, "…") || strings.Contains(got, "\x1b") || !strings.HasPrefix(lines[1], "──") {
			t.Fatalf("width %d: want a header rule, nothing cut, no escape codes without colour:\n%s", width, got)
		}
		if width == 50 {
			continue
		}
		col := strings.Index(lines[0], "LAST_ERROR")
		var errText strings.Builder
		for _, l := range lines[2 : len(lines)-1] { // the error row's lines
			errText.WriteString(strings.TrimSpace(l[col:]))
			if strings.TrimSpace(l[:col]) != "" && !strings.HasPrefix(l, "01JA0000000000000000000000  beta") {
				t.Fatalf("width %d: other columns spill into the wrapped lines:\n%s", width, got)
			}
		}
		if strings.ReplaceAll(errText.String(), " ", "") != strings.ReplaceAll(longErr, " ", "") {
			t.Fatalf("width %d: the error is not whole:\n%s\n%q", width, got, errText.String())
		}
		if n := len(lines) - 3; (width == 200) != (n == 1) {
			t.Fatalf("width %d: the error takes %d lines:\n%s", width, n, got)
		}
	}
}

// Colour on a terminal: escape codes in the header; with colour off (NO_COLOR), none.
func TestTableColour(t *testing.T) {
	if got := render(t, sampleTable(), tableOut{tty: true, width: 120, color: true}); !strings.Contains(got, "\x1b[") {
		t.Fatalf("colour on: no escape codes:\n%q", got)
	}
	if got := render(t, sampleTable(), tableOut{tty: true, width: 120}); strings.Contains(got, "\x1b") {
		t.Fatalf("colour off: escape codes:\n%q", got)
	}
}

// NO_COLOR (even empty) and TERM=dumb turn colour off; an unknown width is $COLUMNS, else 100;
// a writer that is not a file is never a terminal.
func TestTableOutOf(t *testing.T) {
	env := func(vars map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
	}
	for _, tc := range []struct {
		width int
		vars  map[string]string
		want  tableOut
	}{
		{120, map[string]string{"TERM": "xterm"}, tableOut{tty: true, width: 120, color: true}},
		{120, map[string]string{"NO_COLOR": ""}, tableOut{tty: true, width: 120}},
		{120, map[string]string{"NO_COLOR": "1", "TERM": "xterm"}, tableOut{tty: true, width: 120}},
		{120, map[string]string{"TERM": "dumb"}, tableOut{tty: true, width: 120}},
		{0, map[string]string{"COLUMNS": "77"}, tableOut{tty: true, width: 77, color: true}},
		{0, map[string]string{"COLUMNS": "wide"}, tableOut{tty: true, width: 100, color: true}},
	} {
		if got := terminalOut(tc.width, env(tc.vars)); got != tc.want {
			t.Errorf("terminalOut(%d, %v) = %+v, want %+v", tc.width, tc.vars, got, tc.want)
		}
	}
	if out := tableOutOf(&bytes.Buffer{}); out.tty {
		t.Fatalf("a buffer is taken for a terminal: %+v", out)
	}
}

// A terminal too narrow for the whole column at its least width loses the spare columns, in
// order, and no more than it must; a wide one keeps them all.
func TestTableSpareColumns(t *testing.T) {
	tb := sampleTable()
	tb.spare = []int{2, 1}
	// 67: MSG_ID (26), HOST (13: gamma\x0aline) and LAST_ERROR at its least (24), two apart.
	got := render(t, tb, tableOut{tty: true, width: 67})
	lines := strings.Split(strings.TrimSuffix(got, "\n"), "\n")
	if !strings.HasPrefix(lines[0], "MSG_ID") || strings.Contains(lines[0], "STATE") || !strings.Contains(lines[0], "HOST") {
		t.Fatalf("width 67: want STATE left out and HOST kept:\n%s", got)
	}
	for _, l := range lines {
		if ansi.StringWidth(l) > 67 {
			t.Fatalf("width 67: line too wide %q", l)
		}
	}
	if !strings.HasPrefix(lines[2], "01JA0000000000000000000000  beta") {
		t.Fatalf("the kept columns are not whole:\n%s", got)
	}
	tb = sampleTable()
	tb.spare = []int{2, 1}
	if got := render(t, tb, tableOut{tty: true, width: 100}); !strings.Contains(got, "STATE") {
		t.Fatalf("width 100: STATE left out:\n%s", got)
	}
}
