package mbx

import (
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"unicode"
)

// parseJSLiteral reads the JavaScript literal forms the vectors' js_only cases write in input_js
// (README "How a verifier should use them", item 5): JSON plus NaN, Infinity, -Infinity and
// undefined, unquoted identifier keys, single-quoted strings and one pair of parentheses around
// the whole value. It returns the Go value that stands for the JS value:
//
//   - a number is a float64 (NaN and ±Inf included);
//   - undefined in an array is nil (a Go slice has no "absent" slot);
//   - an object with an undefined field becomes a struct whose field is `omitempty` and unset,
//     the Go form of a field that is present in the type but holds nothing; any other object is a
//     map[string]any.
//
// Top-level undefined and everything else JavaScript allows (expressions, comments, template
// strings) are errors: a vector set that uses them needs this parser extended, not a guess.
func parseJSLiteral(src string) (any, error) {
	p := &jsParser{s: src}
	p.space()
	paren := p.eat('(')
	v, err := p.value()
	if err != nil {
		return nil, err
	}
	if paren && !p.eat(')') {
		return nil, p.errf("missing )")
	}
	p.space()
	if p.i != len(p.s) {
		return nil, p.errf("data after the value")
	}
	if v == jsUndefined {
		return nil, p.errf("undefined at the top level has no Go form")
	}
	return v, nil
}

type jsUndef struct{}

// jsUndefined marks undefined while parsing; it never leaves parseJSLiteral.
var jsUndefined any = jsUndef{}

type jsParser struct {
	s string
	i int
}

func (p *jsParser) errf(format string, a ...any) error {
	return fmt.Errorf("js literal %q at %d: %s", p.s, p.i, fmt.Sprintf(format, a...))
}

func (p *jsParser) space() {
	for p.i < len(p.s) && strings.IndexByte(" \t\r\n", p.s[p.i]) >= 0 {
		p.i++
	}
}

func (p *jsParser) eat(c byte) bool {
	p.space()
	if p.i < len(p.s) && p.s[p.i] == c {
		p.i++
		return true
	}
	return false
}

func (p *jsParser) value() (any, error) {
	p.space()
	if p.i >= len(p.s) {
		return nil, p.errf("missing value")
	}
	switch c := p.s[p.i]; {
	case c == '[':
		return p.array()
	case c == '{':
		return p.object()
	case c == '"' || c == '\'':
		return p.str()
	case c == '-' || c == '+' || c == '.' || c >= '0' && c <= '9':
		return p.number()
	default:
		return p.word()
	}
}

func (p *jsParser) word() (any, error) {
	switch id := p.ident(); id {
	case "NaN":
		return math.NaN(), nil
	case "Infinity":
		return math.Inf(1), nil
	case "undefined":
		return jsUndefined, nil
	case "null":
		return nil, nil
	case "true":
		return true, nil
	case "false":
		return false, nil
	default:
		return nil, p.errf("unknown word %q", id)
	}
}

func (p *jsParser) ident() string {
	start := p.i
	for p.i < len(p.s) {
		r := rune(p.s[p.i])
		if r != '_' && r != '$' && !unicode.IsLetter(r) && !(p.i > start && unicode.IsDigit(r)) {
			break
		}
		p.i++
	}
	return p.s[start:p.i]
}

func (p *jsParser) number() (any, error) {
	sign := 1.0
	if p.s[p.i] == '-' || p.s[p.i] == '+' {
		if p.s[p.i] == '-' {
			sign = -1
		}
		p.i++
		if strings.HasPrefix(p.s[p.i:], "Infinity") {
			p.i += len("Infinity")
			return math.Inf(int(sign)), nil
		}
	}
	start := p.i
	for p.i < len(p.s) && strings.IndexByte("0123456789.eE+-xXabcdefABCDEF_", p.s[p.i]) >= 0 {
		p.i++
	}
	text := strings.ReplaceAll(p.s[start:p.i], "_", "")
	var f float64
	var err error
	if strings.HasPrefix(text, "0x") || strings.HasPrefix(text, "0X") {
		var u uint64
		u, err = strconv.ParseUint(text[2:], 16, 64)
		f = float64(u)
	} else {
		f, err = strconv.ParseFloat(text, 64)
	}
	if err != nil {
		return nil, p.errf("bad number %q", text)
	}
	return sign * f, nil
}

func (p *jsParser) str() (any, error) {
	q := p.s[p.i]
	var b strings.Builder
	for p.i++; p.i < len(p.s); p.i++ {
		c := p.s[p.i]
		switch {
		case c == q:
			p.i++
			return b.String(), nil
		case c == '\\':
			if err := p.escape(&b); err != nil {
				return nil, err
			}
		case c == '\n':
			return nil, p.errf("newline in a string")
		default:
			b.WriteByte(c)
		}
	}
	return nil, p.errf("unterminated string")
}

func (p *jsParser) escape(b *strings.Builder) error {
	p.i++
	if p.i >= len(p.s) {
		return p.errf("unterminated escape")
	}
	if r, ok := map[byte]rune{'n': '\n', 't': '\t', 'r': '\r', 'b': '\b', 'f': '\f', 'v': '\v', '0': 0}[p.s[p.i]]; ok {
		b.WriteRune(r)
		return nil
	}
	if p.s[p.i] != 'u' {
		b.WriteByte(p.s[p.i])
		return nil
	}
	if p.i+4 >= len(p.s) {
		return p.errf("short \\u escape")
	}
	u, err := strconv.ParseUint(p.s[p.i+1:p.i+5], 16, 16)
	if err != nil || u >= 0xD800 && u < 0xE000 {
		return p.errf("\\u escape %q (a lone surrogate has no Go string form)", p.s[p.i+1:p.i+5])
	}
	b.WriteRune(rune(u))
	p.i += 4
	return nil
}

func (p *jsParser) array() (any, error) {
	p.i++
	out := []any{}
	for !p.eat(']') {
		if len(out) > 0 && !p.eat(',') {
			return nil, p.errf("missing , in array")
		}
		if p.eat(']') { // a trailing comma
			break
		}
		v, err := p.value()
		if err != nil {
			return nil, err
		}
		if v == jsUndefined {
			v = nil
		}
		out = append(out, v)
	}
	return out, nil
}

type jsField struct {
	key string
	val any
}

func (p *jsParser) object() (any, error) {
	p.i++
	var fields []jsField
	for !p.eat('}') {
		if len(fields) > 0 && !p.eat(',') {
			return nil, p.errf("missing , in object")
		}
		if p.eat('}') {
			break
		}
		f, err := p.field()
		if err != nil {
			return nil, err
		}
		fields = append(fields, f)
	}
	return jsObject(fields)
}

func (p *jsParser) field() (jsField, error) {
	p.space()
	var key string
	if p.i < len(p.s) && (p.s[p.i] == '"' || p.s[p.i] == '\'') {
		k, err := p.str()
		if err != nil {
			return jsField{}, err
		}
		key = k.(string)
	} else if key = p.ident(); key == "" {
		return jsField{}, p.errf("missing key")
	}
	if !p.eat(':') {
		return jsField{}, p.errf("missing : after %q", key)
	}
	v, err := p.value()
	return jsField{key, v}, err
}

// jsObject builds the Go form of an object: a map unless a field is undefined, then a struct with
// that field `omitempty` and unset. The last of duplicate keys wins, as in JavaScript.
func jsObject(fields []jsField) (any, error) {
	m := map[string]any{}
	last := map[string]int{}
	undefined := false
	for i, f := range fields {
		m[f.key], last[f.key] = f.val, i
		undefined = undefined || f.val == jsUndefined
	}
	if !undefined {
		return m, nil
	}
	var sf []reflect.StructField
	var vals []any
	for i, f := range fields {
		if last[f.key] != i {
			continue // overridden by a later duplicate
		}
		tag := fmt.Sprintf(`json:%q`, f.key)
		if f.val == jsUndefined {
			tag = fmt.Sprintf(`json:%q`, f.key+",omitempty")
		}
		if strings.ContainsAny(f.key, "\",\\`") {
			return nil, fmt.Errorf("js literal: key %q next to an undefined field cannot be a Go struct tag", f.key)
		}
		sf = append(sf, reflect.StructField{Name: fmt.Sprintf("F%d", len(sf)), Type: reflect.TypeFor[any](), Tag: reflect.StructTag(tag)})
		vals = append(vals, f.val)
	}
	v := reflect.New(reflect.StructOf(sf)).Elem()
	for i, x := range vals {
		if x != jsUndefined && x != nil {
			v.Field(i).Set(reflect.ValueOf(x))
		}
	}
	return v.Interface(), nil
}
