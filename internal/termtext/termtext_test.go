package termtext

import (
	"errors"
	"log/slog"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestEscapes(t *testing.T) {
	for _, tt := range []struct{ in, block, line string }{
		{"plain text, no change", "plain text, no change", "plain text, no change"},
		{"two\nlines\tand a tab", "two\nlines\tand a tab", `two\x0alines\x09and a tab`},
		{"\x1b[31mred\x1b[0m", `\x1b[31mred\x1b[0m`, `\x1b[31mred\x1b[0m`},
		{"over\rwrite", `over\x0dwrite`, `over\x0dwrite`},
		{"\u202eevil\u202c", `\u{202e}evil\u{202c}`, `\u{202e}evil\u{202c}`},
		{"iso\u2066late\u2069 mark\u200f", `iso\u{2066}late\u{2069} mark\u{200f}`, `iso\u{2066}late\u{2069} mark\u{200f}`},
		{"c1 \u0085 \u009b", `c1 \u{0085} \u{009b}`, `c1 \u{0085} \u{009b}`},
		{"sep\u2028", `sep\u{2028}`, `sep\u{2028}`},
		{"bad \xff\xfe utf8", `bad \xff\xfe utf8`, `bad \xff\xfe utf8`},
		{`C:\dir\file`, `C:\dir\file`, `C:\dir\file`},
		{`a literal \x1b`, `a literal \\x1b`, `a literal \\x1b`},
		{`\u{202e} typed`, `\\u{202e} typed`, `\\u{202e} typed`},
		{"\\\x1b", `\\\x1b`, `\\\x1b`},
		{`\\`, `\\\`, `\\\`},
		{"end\\", "end\\", "end\\"},
		{"tab after backslash \\\t", "tab after backslash \\\t", `tab after backslash \\\x09`},
		{"emoji 👍 and accents é", "emoji 👍 and accents é", "emoji 👍 and accents é"},
	} {
		if got := Block(tt.in); got != tt.block {
			t.Errorf("Block(%q) = %q, want %q", tt.in, got, tt.block)
		}
		if got := Line(tt.in); got != tt.line {
			t.Errorf("Line(%q) = %q, want %q", tt.in, got, tt.line)
		}
		for _, out := range []string{tt.block, tt.line} {
			if back, err := Unescape(out); err != nil || back != tt.in {
				t.Errorf("Unescape(%q) = %q, %v; want %q", out, back, err, tt.in)
			}
		}
	}
}

func TestUnescapeRefusesWhatIsNeverWritten(t *testing.T) {
	for _, s := range []string{`\x1`, `\xzz`, `\u{`, `\u{zz}`, `\u{110000}`, `\u{1234567}`, `\u202e`} {
		if got, err := Unescape(s); err == nil {
			t.Errorf("Unescape(%q) = %q, want an error", s, got)
		}
	}
}

// check asserts what Block and Line promise for any input: valid UTF-8 out, no hidden rune
// (but newline and tab in Block), the input back from Unescape, and printable text unchanged.
func check(t *testing.T, in string) {
	for _, f := range []struct {
		name      string
		escape    func(string) string
		keepLines bool
	}{{"Block", Block, true}, {"Line", Line, false}} {
		out := f.escape(in)
		if !utf8.ValidString(out) {
			t.Fatalf("%s(%q) = %q: not UTF-8", f.name, in, out)
		}
		if i := strings.IndexFunc(out, func(r rune) bool {
			return Hidden(r) && !(f.keepLines && (r == '\n' || r == '\t'))
		}); i >= 0 {
			t.Fatalf("%s(%q) = %q: hidden rune at %d", f.name, in, out, i)
		}
		back, err := Unescape(out)
		if err != nil || back != in {
			t.Fatalf("Unescape(%s(%q)) = %q, %v: not the input", f.name, in, back, err)
		}
		printable := utf8.ValidString(in) && !strings.ContainsRune(in, '\\') &&
			!strings.ContainsFunc(in, func(r rune) bool { return Hidden(r) && !(f.keepLines && (r == '\n' || r == '\t')) })
		if printable && out != in {
			t.Fatalf("%s(%q) = %q: printable text changed", f.name, in, out)
		}
	}
}

func FuzzEscape(f *testing.F) {
	for _, s := range []string{"", "plain", "\x1b[2J\x1b]0;title\x07", "\u202eevil", "a\\x1b", "\\\x1b", "\xff",
		"\u2066\u2069\u200e", "\r\n\t", "\\u{41}", "\\", "é\u0085"} {
		f.Add(s)
	}
	f.Fuzz(check)
}

// TestTextLogs: a text log of a hostile value and error shows them escaped, no hidden rune.
func TestTextLogs(t *testing.T) {
	var b strings.Builder
	log := slog.New(slog.NewTextHandler(&b, TextLogOptions(slog.LevelInfo)))
	log.Warn("peer said \x1b[2J", "peer", "evil\u202etxt.exe", "err", errors.New("boom\r\x1b]0;owned\x07"), "n", 3)
	out := b.String()
	if i := strings.IndexFunc(strings.TrimSuffix(out, "\n"), Hidden); i >= 0 {
		t.Fatalf("log line carries a hidden rune at %d: %q", i, out)
	}
	for _, want := range []string{`\u{202e}`, `\x1b]0;owned\x07`, `\x1b[2J`, "n=3"} {
		if !strings.Contains(out, want) {
			t.Errorf("log line %q lacks %q", out, want)
		}
	}
}
