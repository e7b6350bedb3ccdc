package mbx

import (
	"math"
	"testing"
)

func TestParseJSLiteral(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{`({ a: undefined, b: 1 })`, `{"b":1}`},
		{`[undefined, 1]`, `[null,1]`},
		{`{'x y': 'it\'s', "z": [true, null, -2.5e1, 0x10]}`, `{"x y":"it's","z":[true,null,-25,16]}`},
		{`({ a: undefined, a: 2, c: { d: undefined } })`, `{"a":2,"c":{}}`},
		{`[1, 2, ]`, `[1,2]`},
	} {
		v, err := parseJSLiteral(tt.in)
		if err != nil {
			t.Fatalf("%s: %v", tt.in, err)
		}
		got, err := Canonical(v)
		if err != nil || string(got) != tt.want {
			t.Errorf("%s: got %s, %v; want %s", tt.in, got, err, tt.want)
		}
	}
	for in, check := range map[string]func(any) bool{
		`NaN`:          func(v any) bool { f, ok := v.(float64); return ok && math.IsNaN(f) },
		`-Infinity`:    func(v any) bool { f, ok := v.(float64); return ok && math.IsInf(f, -1) },
		`[+Infinity]`:  func(v any) bool { a, ok := v.([]any); return ok && len(a) == 1 && math.IsInf(a[0].(float64), 1) },
		`({ n: NaN })`: func(v any) bool { m, ok := v.(map[string]any); return ok && math.IsNaN(m["n"].(float64)) },
	} {
		v, err := parseJSLiteral(in)
		if err != nil || !check(v) {
			t.Errorf("%s: got %#v, %v", in, v, err)
		}
	}
	for _, in := range []string{``, `undefined`, `(1`, `[1 2]`, `{a 1}`, `foo`, `'open`, `"\ud800"`, `1 2`} {
		if v, err := parseJSLiteral(in); err == nil {
			t.Errorf("%q: accepted as %#v", in, v)
		}
	}
}
