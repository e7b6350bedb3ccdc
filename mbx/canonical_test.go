package mbx

import (
	"errors"
	"math"
	"strings"
	"testing"
)

func TestCanonicalVectors(t *testing.T) {
	type tc struct {
		Name          string `json:"name"`
		InputJSON     string `json:"input_json"`
		Expected      string `json:"expected"`
		ExpectedSHA   string `json:"expected_utf8_sha256"`
		LoneSurrogate bool   `json:"lone_surrogate"`
		JSOnly        bool   `json:"js_only"`
		InputJS       string `json:"input_js"`
		Expect        string `json:"expect"`
		Error         string `json:"error"`
	}
	cases := loadCases[tc](t, "canonical.json")
	var checked, skipped int
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			if c.LoneSurrogate {
				skipped++
				t.Skip("a lone UTF-16 surrogate has no Go string form (see the vectors README)")
			}
			checked++
			var got []byte
			var err error
			if c.JSOnly {
				v, perr := parseJSLiteral(c.InputJS)
				if perr != nil {
					t.Fatal(perr)
				}
				got, err = Canonical(v)
			} else {
				got, err = CanonicalJSON([]byte(c.InputJSON))
			}
			if c.Expect == "error" {
				if err == nil {
					t.Fatalf("Canonical accepted %s%s as %q; the original threw %q", c.InputJS, c.InputJSON, got, c.Error)
				}
				if strings.Contains(c.Error, "non-finite") && !errors.Is(err, ErrNonFinite) {
					t.Fatalf("err = %v, want ErrNonFinite (the original: %q)", err, c.Error)
				}
				return
			}
			if err != nil {
				t.Fatalf("Canonical(%s%s): %v", c.InputJS, c.InputJSON, err)
			}
			if string(got) != c.Expected {
				t.Errorf("got  %q\nwant %q", got, c.Expected)
			}
			if h := SHA256Hex(got); c.ExpectedSHA != "" && h != c.ExpectedSHA {
				t.Errorf("sha256 got %s want %s", h, c.ExpectedSHA)
			}
		})
	}
	if checked+skipped != len(cases) {
		t.Fatalf("%d canonical cases checked and %d skipped, the file has %d", checked, skipped, len(cases))
	}
	t.Logf("canonical.json: %d cases checked, %d lone-surrogate cases skipped", checked, skipped)
}

// The js_only cases, expressed with Go values.
func TestCanonicalGoValues(t *testing.T) {
	for _, v := range []any{math.NaN(), []any{math.Inf(1)}, map[string]any{"n": math.Inf(-1)}} {
		if _, err := Canonical(v); !errors.Is(err, ErrNonFinite) {
			t.Errorf("Canonical(%v) err = %v, want ErrNonFinite", v, err)
		}
	}
	type rec struct {
		B    int    `json:"b"`
		A    string `json:"a,omitempty"`
		Note string `json:"note,omitempty"`
		HTML string `json:"html"`
	}
	got, err := Canonical(rec{B: 1, HTML: "<a&b>\u2028"})
	if err != nil {
		t.Fatal(err)
	}
	if want := "{\"b\":1,\"html\":\"<a&b>\u2028\"}"; string(got) != want {
		t.Errorf("got %q want %q", got, want)
	}
	if _, err := Canonical("bad \xff utf-8"); !errors.Is(err, ErrInvalidUTF8) {
		t.Errorf("invalid UTF-8: err = %v, want ErrInvalidUTF8", err)
	}
	for _, tt := range []struct {
		in   float64
		want string
	}{{math.Copysign(0, -1), "0"}, {1e21, "1e+21"}, {123e-20, "1.23e-18"}, {-1.5, "-1.5"}, {1e-6, "0.000001"}, {1.7e12, "1700000000000"}} {
		got, err := Canonical(tt.in)
		if err != nil || string(got) != tt.want {
			t.Errorf("Canonical(%v) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

func TestParseJSONRejects(t *testing.T) {
	for _, in := range []string{"", "{", `{"a":1} x`, `[1,]`, `{'a':1}`} {
		if _, err := ParseJSON([]byte(in)); !errors.Is(err, ErrBadJSON) {
			t.Errorf("ParseJSON(%q) err = %v, want ErrBadJSON", in, err)
		}
	}
}

func FuzzCanonicalJSON(f *testing.F) {
	for _, s := range []string{`{}`, `{"b":[1,2.5,-0,1e21],"a":"x\u0001\u2028<"}`, `"\ud83d\ude00"`, `[null,true,{"é":{"z":1}}]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c1, err := CanonicalJSON(data)
		if err != nil {
			return
		}
		// Canonical output is a fixed point: re-canonicalizing changes nothing.
		c2, err := CanonicalJSON(c1)
		if err != nil {
			t.Fatalf("canonical output does not parse: %q: %v", c1, err)
		}
		if string(c1) != string(c2) {
			t.Fatalf("not a fixed point:\n%q\n%q", c1, c2)
		}
	})
}
