package mbx

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"unicode/utf8"
)

// Canonical returns the canonical JSON of v: the exact bytes every signature of the protocol covers.
//
// The rules are those of the original implementation's canonical(): object keys sorted by UTF-16
// code units (not by code point or UTF-8 bytes), no whitespace, arrays in order, strings escaped
// exactly as JavaScript's JSON.stringify escapes them (only '"', '\\' and U+0000–U+001F; '<', '>',
// '&', U+2028 and U+2029 stay raw), and numbers printed as JavaScript prints a double.
//
// v may be a generic tree (map[string]any, []any, string, bool, nil, any Go number, json.Number,
// json.RawMessage) or any other Go value, which is first encoded with encoding/json (so a struct's
// `omitempty` fields are dropped when absent, as JavaScript drops undefined fields).
func Canonical(v any) ([]byte, error) {
	return appendCanonical(make([]byte, 0, 256), v)
}

// CanonicalJSON parses data as JSON.parse would (numbers become doubles, the last of duplicate keys
// wins) and returns its canonical form.
func CanonicalJSON(data []byte) ([]byte, error) {
	v, err := ParseJSON(data)
	if err != nil {
		return nil, err
	}
	return Canonical(v)
}

// ParseJSON decodes exactly one JSON value into a generic tree (map[string]any, []any, string,
// bool, nil, json.Number). Trailing data after the value is an error.
func ParseJSON(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadJSON, err)
	}
	if len(bytes.TrimLeft(data[dec.InputOffset():], " \t\r\n")) != 0 {
		return nil, fmt.Errorf("%w: data after the value", ErrBadJSON)
	}
	return v, nil
}

// MarshalJSON encodes v with encoding/json without HTML escaping (the bytes JSON.stringify writes
// for the same value) and without the trailing newline.
func MarshalJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte{'\n'}), nil
}

// appendJSStrings appends xs as a JSON array of strings.
func appendJSStrings(b []byte, xs []string) ([]byte, error) {
	b = append(b, '[')
	for i, x := range xs {
		if i > 0 {
			b = append(b, ',')
		}
		var err error
		if b, err = appendJSString(b, x); err != nil {
			return b, err
		}
	}
	return append(b, ']'), nil
}

func appendCanonical(buf []byte, v any) ([]byte, error) {
	switch x := v.(type) {
	case nil:
		return append(buf, "null"...), nil
	case bool:
		return strconv.AppendBool(buf, x), nil
	case string:
		return appendJSString(buf, x)
	case json.Number:
		f, err := strconv.ParseFloat(string(x), 64)
		if err != nil && !math.IsInf(f, 0) {
			return nil, fmt.Errorf("%w: number %q", ErrBadJSON, string(x))
		}
		return appendJSNumber(buf, f)
	case float64:
		return appendJSNumber(buf, x)
	case float32:
		return appendJSNumber(buf, float64(x))
	case int:
		return appendJSNumber(buf, float64(x))
	case int64:
		return appendJSNumber(buf, float64(x))
	case int32:
		return appendJSNumber(buf, float64(x))
	case uint32:
		return appendJSNumber(buf, float64(x))
	case uint64:
		return appendJSNumber(buf, float64(x))
	case []any:
		buf = append(buf, '[')
		for i, e := range x {
			if i > 0 {
				buf = append(buf, ',')
			}
			var err error
			if buf, err = appendCanonical(buf, e); err != nil {
				return nil, err
			}
		}
		return append(buf, ']'), nil
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.SortFunc(keys, compareUTF16)
		buf = append(buf, '{')
		for i, k := range keys {
			if i > 0 {
				buf = append(buf, ',')
			}
			var err error
			if buf, err = appendJSString(buf, k); err != nil {
				return nil, err
			}
			buf = append(buf, ':')
			if buf, err = appendCanonical(buf, x[k]); err != nil {
				return nil, err
			}
		}
		return append(buf, '}'), nil
	case json.RawMessage:
		t, err := ParseJSON(x)
		if err != nil {
			return nil, err
		}
		return appendCanonical(buf, t)
	default:
		raw, err := MarshalJSON(v)
		if err != nil {
			return nil, fmt.Errorf("%w: %T: %v", ErrUnsupported, v, err)
		}
		t, err := ParseJSON(raw)
		if err != nil {
			return nil, err
		}
		return appendCanonical(buf, t)
	}
}

// compareUTF16 orders strings by their UTF-16 code units, as Array.prototype.sort() does.
func compareUTF16(a, b string) int {
	for a != "" && b != "" {
		ra, na := utf8.DecodeRuneInString(a)
		rb, nb := utf8.DecodeRuneInString(b)
		if ra != rb {
			ua, ub := firstUnit(ra), firstUnit(rb)
			if ua != ub {
				return int(ua) - int(ub)
			}
			// Both are supplementary with the same high surrogate: the low surrogates decide,
			// and they order as the code points do.
			return int(ra) - int(rb)
		}
		a, b = a[na:], b[nb:]
	}
	return len(a) - len(b)
}

// firstUnit is the first UTF-16 code unit of r.
func firstUnit(r rune) rune {
	if r >= 0x10000 {
		return 0xD800 + (r-0x10000)>>10
	}
	return r
}

const hexDigits = "0123456789abcdef"

// appendJSString appends s quoted and escaped as JSON.stringify does.
func appendJSString(buf []byte, s string) ([]byte, error) {
	if !utf8.ValidString(s) {
		return nil, ErrInvalidUTF8
	}
	buf = appendJSEscaped(append(buf, '"'), s)
	return append(buf, '"'), nil
}

// jsEscaped marks the bytes appendJSEscaped escapes: the control characters, '"' and '\\'.
var jsEscaped = func() (t [256]bool) {
	for c := range 0x20 {
		t[c] = true
	}
	t['"'], t['\\'] = true, true
	return t
}()

// appendJSEscaped appends valid UTF-8 s as the inside of a JSON string, escaped as
// appendJSString escapes it.
func appendJSEscaped[T string | []byte](buf []byte, s T) []byte {
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !jsEscaped[c] {
			continue
		}
		buf = append(buf, s[start:i]...)
		switch c {
		case '"':
			buf = append(buf, '\\', '"')
		case '\\':
			buf = append(buf, '\\', '\\')
		case '\b':
			buf = append(buf, '\\', 'b')
		case '\f':
			buf = append(buf, '\\', 'f')
		case '\n':
			buf = append(buf, '\\', 'n')
		case '\r':
			buf = append(buf, '\\', 'r')
		case '\t':
			buf = append(buf, '\\', 't')
		default:
			buf = append(buf, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		}
		start = i + 1
	}
	return append(buf, s[start:]...)
}

// appendJSNumber appends f as ECMAScript's Number::toString prints it.
func appendJSNumber(buf []byte, f float64) ([]byte, error) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return nil, ErrNonFinite
	}
	if f == 0 {
		return append(buf, '0'), nil // also -0
	}
	if f < 0 {
		buf = append(buf, '-')
		f = -f
	}
	// Shortest round-trip digits, as both Go and ECMAScript choose them.
	e := strconv.AppendFloat(nil, f, 'e', -1, 64) // d[.ddd]e±xx
	mant, exp, _ := bytes.Cut(e, []byte{'e'})
	digits := make([]byte, 0, len(mant))
	for _, c := range mant {
		if c != '.' {
			digits = append(digits, c)
		}
	}
	x, _ := strconv.Atoi(string(exp))
	k, n := len(digits), x+1
	switch {
	case k <= n && n <= 21:
		buf = append(buf, digits...)
		for range n - k {
			buf = append(buf, '0')
		}
	case 0 < n && n <= 21:
		buf = append(buf, digits[:n]...)
		buf = append(buf, '.')
		buf = append(buf, digits[n:]...)
	case -6 < n && n <= 0:
		buf = append(buf, '0', '.')
		for range -n {
			buf = append(buf, '0')
		}
		buf = append(buf, digits...)
	default:
		buf = append(buf, digits[0])
		if k > 1 {
			buf = append(buf, '.')
			buf = append(buf, digits[1:]...)
		}
		buf = append(buf, 'e')
		if n-1 >= 0 {
			buf = append(buf, '+')
		}
		buf = strconv.AppendInt(buf, int64(n-1), 10)
	}
	return buf, nil
}
