// Package termtext makes text that came from elsewhere (a subject, a body, a note, a name, a
// peer's error) safe to print on a terminal, in an MCP text summary or in a text log: nothing
// it returns carries a control character that a terminal acts on (C0, DEL, C1: escape sequences,
// carriage returns, backspaces), a line or paragraph separator, or a bidirectional embedding,
// override, isolate or mark that would reorder what a reader sees. Such runes, and bytes that
// are not UTF-8, are written as visible escapes:
//
//	\xNN     a byte: a C0 control or DEL (NN < 80), or a byte that is not UTF-8 (NN >= 80)
//	\u{NNNN} any other hidden rune (C1 controls, U+2028, U+202E, U+2066, ...)
//	\\       a backslash that would otherwise read as the start of an escape
//
// Text without such runes and without a backslash before x, u, a backslash or a hidden rune
// comes back unchanged, and Unescape reverses Block and Line exactly, so two different texts
// never print the same. JSON output does not use this package: it keeps the exact text.
package termtext

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Hidden reports whether r is written as an escape: the C0 controls, DEL and the C1 controls;
// U+2028 and U+2029 (line and paragraph separators); the bidirectional embeddings and overrides
// (U+202A..U+202E), isolates (U+2066..U+2069) and marks (U+200E, U+200F, U+061C).
func Hidden(r rune) bool {
	return r < 0x20 || (r >= 0x7f && r <= 0x9f) || r == 0x2028 || r == 0x2029 ||
		(r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069) || r == 0x200e || r == 0x200f || r == 0x061c
}

// Block is text of several lines (a body): newlines and tabs stay, every other hidden rune and
// every byte that is not UTF-8 is escaped.
func Block(s string) string { return escape(s, true) }

// Line is text kept on one line (a subject, a name, a table cell): newlines and tabs are escaped
// too.
func Line(s string) string { return escape(s, false) }

// escape writes s with its hidden runes escaped; keepLines keeps \n and \t.
func escape(s string, keepLines bool) string {
	hides := func(r rune, size int) bool {
		if r == utf8.RuneError && size <= 1 {
			return true // a byte that is not UTF-8
		}
		return Hidden(r) && !(keepLines && (r == '\n' || r == '\t'))
	}
	clean := true
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if hides(r, size) || r == '\\' {
			clean = false
			break
		}
		i += size
	}
	if clean {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case hides(r, size) && r < 0x80:
			fmt.Fprintf(&b, `\x%02x`, r)
		case hides(r, size):
			fmt.Fprintf(&b, `\u{%04x}`, r)
		case r == '\\':
			// A backslash is doubled when what follows would read as an escape: x or u, a
			// backslash, or a rune written as an escape (which starts with a backslash).
			b.WriteByte('\\')
			if j := i + size; j < len(s) {
				n, nsize := utf8.DecodeRuneInString(s[j:])
				if n == 'x' || n == 'u' || n == '\\' || hides(n, nsize) {
					b.WriteByte('\\')
				}
			}
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// ErrBadEscape is returned by Unescape for text that Block and Line never write.
var ErrBadEscape = errors.New("termtext: bad escape")

// Unescape returns the text that Block or Line turned into s.
func Unescape(s string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' || i+1 == len(s) {
			b.WriteByte(c)
			continue
		}
		switch s[i+1] {
		case '\\':
			b.WriteByte('\\')
			i++
		case 'x':
			if i+4 > len(s) {
				return "", fmt.Errorf("%w at %d", ErrBadEscape, i)
			}
			v, err := strconv.ParseUint(s[i+2:i+4], 16, 8)
			if err != nil {
				return "", fmt.Errorf("%w at %d", ErrBadEscape, i)
			}
			b.WriteByte(byte(v))
			i += 3
		case 'u':
			end := strings.IndexByte(s[i:], '}')
			if end < 0 || i+3 > len(s) || s[i+2] != '{' || end > 3+6 {
				return "", fmt.Errorf("%w at %d", ErrBadEscape, i)
			}
			v, err := strconv.ParseUint(s[i+3:i+end], 16, 32)
			if err != nil || !utf8.ValidRune(rune(v)) {
				return "", fmt.Errorf("%w at %d", ErrBadEscape, i)
			}
			b.WriteRune(rune(v))
			i += end
		default:
			b.WriteByte(c) // a backslash that starts no escape stands for itself
		}
	}
	return b.String(), nil
}
