package compat_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The strict decoder: a document is checked against a shape from testdata/shapes (README.md
// there says how a shape is written). Nothing here comes from the implementation.

// shapeFile is one file of testdata/shapes.
type shapeFile struct {
	Doc   string `json:"doc"`
	From  string `json:"from"`
	Shape any    `json:"shape"`
}

// loadShape reads testdata/shapes/<name>.json.
func loadShape(t *testing.T, name string) shapeFile {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "shapes", name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var f shapeFile
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil || f.Shape == nil {
		t.Fatalf("shape %s: %v", name, err)
	}
	return f
}

// checkDoc decodes doc and checks it against the shape name; it returns the decoded document.
func checkDoc(t *testing.T, name string, doc []byte) map[string]any {
	t.Helper()
	v, errs := validate(loadShape(t, name).Shape, doc)
	for _, e := range errs {
		t.Errorf("%s: %s\n  document: %s", name, e, clip(doc))
	}
	m, _ := v.(map[string]any)
	return m
}

func clip(b []byte) string {
	if len(b) > 600 {
		return string(b[:600]) + "…"
	}
	return string(b)
}

// validate decodes doc (numbers kept as json.Number) and lists every way it breaks shape.
func validate(shape any, doc []byte) (any, []string) {
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, []string{"not JSON: " + err.Error()}
	}
	if dec.More() {
		return nil, []string{"more than one JSON value"}
	}
	var errs []string
	walk("$", shape, v, &errs)
	return v, errs
}

func walk(path string, shape, v any, errs *[]string) {
	bad := func(format string, a ...any) { *errs = append(*errs, path+": "+fmt.Sprintf(format, a...)) }
	switch s := shape.(type) {
	case string:
		for _, alt := range strings.Split(s, "|") {
			if matchesType(strings.TrimSpace(alt), v) {
				return
			}
		}
		bad("%s is not %s", describe(v), s)
	case []any:
		arr, ok := v.([]any)
		if !ok {
			bad("%s is not an array", describe(v))
			return
		}
		for i, e := range arr {
			walk(fmt.Sprintf("%s[%d]", path, i), s[0], e, errs)
		}
	case map[string]any:
		if v == nil && s["$null"] == true {
			return
		}
		obj, ok := v.(map[string]any)
		if !ok {
			bad("%s is not an object", describe(v))
			return
		}
		known := map[string]bool{}
		for name, fs := range s {
			if name == "$null" {
				continue
			}
			field, optional := strings.TrimSuffix(strings.TrimPrefix(name, "+"), "?"), strings.HasSuffix(name, "?") || strings.HasPrefix(name, "+")
			known[field] = true
			fv, present := obj[field]
			switch {
			case !present && !optional:
				bad("missing field %q", field)
			case present:
				walk(path+"."+field, fs, fv, errs)
			}
		}
		for _, k := range slices.Sorted(mapKeys(obj)) {
			if !known[k] {
				bad("unknown field %q", k)
			}
		}
	default:
		bad("bad shape %#v", shape)
	}
}

func mapKeys(m map[string]any) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

var (
	isoTime = regexp.MustCompile(`^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$`)
	hex64   = regexp.MustCompile(`^[0-9a-f]{64}$`)
	b64std  = regexp.MustCompile(`^[A-Za-z0-9+/]*={0,2}$`)
)

// matchesType reports whether v is of the type expression t (one alternative).
func matchesType(t string, v any) bool {
	str, isStr := v.(string)
	switch {
	case strings.HasPrefix(t, "="):
		dec := json.NewDecoder(strings.NewReader(t[1:]))
		dec.UseNumber()
		var want any
		if dec.Decode(&want) != nil {
			return false
		}
		return fmt.Sprint(want) == fmt.Sprint(v) && fmt.Sprintf("%T", want) == fmt.Sprintf("%T", v)
	case strings.HasPrefix(t, "prefix:"):
		return isStr && strings.HasPrefix(str, t[len("prefix:"):])
	case strings.HasPrefix(t, "oneof:"):
		return isStr && slices.Contains(strings.Split(t[len("oneof:"):], ","), str)
	}
	switch t {
	case "int":
		n, ok := v.(json.Number)
		if !ok || strings.ContainsAny(string(n), ".eE") {
			return false
		}
		i, err := strconv.ParseInt(string(n), 10, 64)
		return err == nil && math.Abs(float64(i)) <= 1<<53-1
	case "bool":
		_, ok := v.(bool)
		return ok
	case "string":
		return isStr
	case "object":
		_, ok := v.(map[string]any)
		return ok
	case "null":
		return v == nil
	case "key":
		return isStr && len(str) == 44 && decodedLen(str) == 32
	case "sig":
		return isStr && decodedLen(str) == 64
	case "b64":
		return isStr && b64std.MatchString(str) && decodedLen(str) >= 0
	case "time":
		return isStr && isoTime.MatchString(str)
	case "hex64":
		return isStr && hex64.MatchString(str)
	}
	return false
}

// decodedLen is the length of standard base64 s decoded, -1 when it is not that.
func decodedLen(s string) int {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return -1
	}
	return len(b)
}

func describe(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case string:
		return strconv.Quote(clip([]byte(x)))
	case json.Number:
		return "number " + string(x)
	case bool:
		return strconv.FormatBool(x)
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}

// TestShapesCatch: the decoder refuses an unknown field, a missing one and a value of another
// type (the mistake of issue 26: a boolean where a key or null belongs), so the suite cannot pass
// vacuously; and every shape file parses.
func TestShapesCatch(t *testing.T) {
	entries, err := os.ReadDir(filepath.Join("testdata", "shapes"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range entries {
		if name, ok := strings.CutSuffix(e.Name(), ".json"); ok {
			loadShape(t, name)
			n++
		}
	}
	if n < 20 {
		t.Fatalf("only %d shapes", n)
	}
	info := loadShape(t, "info").Shape
	key := base64.StdEncoding.EncodeToString(make([]byte, 32))
	you := func(encAd string) string {
		return `{"v":2,"relay_pubkey":"` + key + `","epoch":"e","version":"x","limits":{"max_item_bytes":1,"max_batch":1,"max_pull":1,"max_pull_bytes":1,"max_targets":1,"retention_days":1,"max_queue_items":1,"max_queue_bytes":1,"max_sender_items":1,"max_sender_bytes":1,"max_owner_items":1,"max_owner_bytes":1},` +
			`"you":{"host":"h","pubkey":"` + key + `","head_seq":0,"acked_through":0,"enc_ad":` + encAd + `}}`
	}
	for _, c := range []struct {
		doc  string
		fail bool
	}{
		{you(`null`), false},
		{you(`{"enc_pub":null,"exp":null,"v1":"` + key + `"}`), false},
		{you(`{"enc_pub":"` + key + `","exp":"2026-10-02T10:00:00.000Z","v1":null}`), false},
		{you(`{"enc_pub":"` + key + `","exp":"2026-10-02T10:00:00.000Z","v1":true}`), true},      // the bug of issue 26
		{you(`{"enc_pub":"` + key + `","exp":"2026-10-02T10:00:00.000Z"}`), true},                // missing v1
		{you(`{"enc_pub":"` + key + `","exp":"2026-10-02","v1":null}`), true},                    // not an ISO time
		{you(`{"enc_pub":null,"exp":null,"v1":null,"extra":1}`), true},                           // unknown field
		{strings.Replace(you(`null`), `"head_seq":0`, `"head_seq":0.5`, 1), true},                // not an integer
		{strings.Replace(you(`null`), `"head_seq":0`, `"head_seq":"0"`, 1), true},                // not a number
		{strings.Replace(you(`null`), `"epoch":"e",`, ``, 1), true},                              // missing field
		{strings.Replace(you(`null`), `"v":2`, `"v":3`, 1), true},                                // wrong constant
		{strings.Replace(you(`null`), `"max_batch":1`, `"max_batch":1,"max_wait":25`, 1), false}, // a documented addition
	} {
		_, errs := validate(info, []byte(c.doc))
		if (len(errs) > 0) != c.fail {
			t.Errorf("validate(%s) = %v, want failure %v", c.doc, errs, c.fail)
		}
	}
}
