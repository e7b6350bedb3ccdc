package mbx

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The perturbed-vector check: the vector tests must hold for any vector set that follows the
// vectors README, not only for the public one. perturbVectors writes a copy of a vector set with
// other host and agent names, other keys, other times (and so other ULIDs) and fewer cases, every
// signature, hash and fingerprint that depends on them re-made through this package by the same
// rules, and the vector tests run again on it.
//
// How the copy is made, for every string of every case (nested JSON included):
//   - a 32-byte base64 value whose public key occurs in the set is a key (Ed25519 seed or X25519
//     private key): it and its public key are replaced by a new key derived from it, in any of
//     the four base64 spellings. New public keys sort as the old ones did, so sorted key lists
//     (sender allowlists) stay sorted;
//   - host and agent names of the set (perturbNames, also order-keeping) are renamed;
//   - times (ISO strings, millisecond counts, ULID time parts) in the set's years move by
//     perturbShift;
//   - a 64-byte base64 value that is the signature, by a key of the set named in its case, of
//     some string of its case (a signing input, the canonical form of a record, a hop input) is
//     re-signed over that string rewritten, by the new key; one that is not (a forged or "another
//     key" signature) stays, and so stays invalid;
//   - a lowercase hex SHA-256 or a fingerprint of a string of its case becomes the hash or the
//     fingerprint of that string rewritten, and a base64 value that encodes a string of its case
//     encodes it rewritten.
//
// Families left as they are, with the reason:
var perturbKeep = map[string]string{
	"envelope.json":     "sealed bodies bind the envelope's ids and names as associated data; re-sealing needs the original's randomness",
	"pairing_code.json": "the 6-digit codes and MACs are not signatures or hashes of a string in the case",
}

// perturbNames renames the public set's host and agent names, keeping their order; "owner" and
// "relay" are roles and stay.
var perturbNames = map[string]string{
	"alice": "abe", "alpha": "acme-1", "beta": "bern", "bob": "bud", "carol": "cole", "dave": "dora-x", "gamma": "gale.lan",
}

// perturbShift is whole seconds, so a time written without milliseconds keeps its form.
const perturbShift = 41*24*time.Hour + 3*time.Hour + 17*time.Minute + 12*time.Second

// Times are moved only inside these bounds (2020 to 2033), so ulid(0) and small counts stay.
var perturbTimeLo, perturbTimeHi = time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2033, 1, 1, 0, 0, 0, 0, time.UTC)

type sigSource struct {
	pub string
	msg string
}

type perturber struct {
	keys   map[string]string     // old seed, private or public key (standard base64) -> new
	old    map[string]SigningKey // old Ed25519 public key -> its key
	next   map[string]SigningKey // old Ed25519 public key -> the new key
	sigs   map[string]*sigSource // a signature (standard base64) -> what it signs
	hashes map[string]*string    // a hex SHA-256 -> its preimage
	fps    map[string]*string    // a fingerprint -> the key it is of
	b64s   map[string]*string    // a base64 value -> the string it encodes
	memo   map[string]string
}

// perturbVectors writes the perturbed copy of the vector set in src to dst. Each case is
// rewritten token by token, so the fields keep their order (some tests compare with the file's
// own spelling of a value).
func perturbVectors(t testing.TB, src, dst string) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(src, "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no vector files in %s: %v", src, err)
	}
	raws := map[string][]byte{}
	docs := map[string]map[string]any{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		var doc map[string]any
		if err := dec.Decode(&doc); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		raws[filepath.Base(f)], docs[filepath.Base(f)] = data, doc
	}
	p := newPerturber(docs)
	for name, doc := range docs {
		if _, keep := perturbKeep[name]; keep {
			continue
		}
		cases, _ := doc["cases"].([]any)
		named := map[string]SigningKey{}
		for _, c := range cases {
			p.learn(c, named)
		}
	}
	for name, data := range raws {
		if _, keep := perturbKeep[name]; !keep {
			if data, err = p.rewriteFile(data); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
		}
		if err := os.WriteFile(filepath.Join(dst, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// rewriteFile rewrites every case of a family and leaves out one from the middle of a family of
// three or more, so no count of the public set survives (the first case stays: some families
// name their keys there).
func (p *perturber) rewriteFile(data []byte) ([]byte, error) {
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, err
	}
	var cases []json.RawMessage
	if err := json.Unmarshal(doc["cases"], &cases); err != nil {
		return nil, err
	}
	if len(cases) >= 3 {
		m := len(cases) / 2
		cases = append(cases[:m:m], cases[m+1:]...)
	}
	for i, c := range cases {
		out, err := p.rewriteRaw(c)
		if err != nil {
			return nil, err
		}
		cases[i] = out
	}
	var err error
	if doc["cases"], err = MarshalJSON(cases); err != nil {
		return nil, err
	}
	return MarshalJSON(doc)
}

// rewriteRaw rewrites one JSON value token by token, keeping its order.
func (p *perturber) rewriteRaw(raw []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	type frame struct {
		obj bool
		n   int
	}
	var stack []frame
	var buf bytes.Buffer
	sep := func() {
		if len(stack) == 0 {
			return
		}
		f := &stack[len(stack)-1]
		switch {
		case f.obj && f.n%2 == 1:
			buf.WriteByte(':')
		case f.n > 0:
			buf.WriteByte(',')
		}
		f.n++
	}
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return buf.Bytes(), nil
		}
		if err != nil {
			return nil, err
		}
		if v, ok := tok.(json.Delim); ok {
			if v == '{' || v == '[' {
				sep()
				stack = append(stack, frame{obj: v == '{'})
			} else {
				stack = stack[:len(stack)-1]
			}
			buf.WriteByte(byte(v))
			continue
		}
		sep()
		b, err := MarshalJSON(p.rewriteValue(tok))
		if err != nil {
			return nil, err
		}
		buf.Write(b)
	}
}

var (
	tokenRE   = regexp.MustCompile(`[A-Za-z0-9+/_-]+={0,2}`)
	isoTime   = regexp.MustCompile(`(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d)`)
	fpToken   = regexp.MustCompile(`^[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}$`)
	hexToken  = regexp.MustCompile(`^[0-9a-f]{64}$`)
	wordRE    = regexp.MustCompile(`[a-z]+`)
	ulidToken = regexp.MustCompile(`^[0-9A-HJKMNP-TV-Z]{10}([0-9A-HJKMNP-TV-Z]{16})?$`)
)

// spelling is how a base64 value is written: standard or URL alphabet, padded or not.
type spelling struct{ url, unpadded bool }

// normB64 returns the standard padded spelling of tok and how tok spells it.
func normB64(tok string) (string, spelling) {
	var sp spelling
	if strings.ContainsAny(tok, "-_") {
		sp.url = true
		tok = strings.NewReplacer("-", "+", "_", "/").Replace(tok)
	}
	if n := len(tok) % 4; n != 0 && !strings.HasSuffix(tok, "=") {
		sp.unpadded = true
		tok += strings.Repeat("=", 4-n)
	}
	return tok, sp
}

func (sp spelling) spell(std string) string {
	if sp.url {
		std = strings.NewReplacer("+", "-", "/", "_").Replace(std)
	}
	if sp.unpadded {
		std = strings.TrimRight(std, "=")
	}
	return std
}

// newPerturber finds the keys of the whole set (a 32-byte value whose public key occurs
// anywhere) and gives each a new one; the new public keys are handed out in the old ones' order.
func newPerturber(docs map[string]map[string]any) *perturber {
	p := &perturber{keys: map[string]string{}, old: map[string]SigningKey{}, next: map[string]SigningKey{},
		sigs: map[string]*sigSource{}, hashes: map[string]*string{}, fps: map[string]*string{}, b64s: map[string]*string{}, memo: map[string]string{}}
	tokens := map[string]bool{}
	for _, doc := range docs {
		walkStrings(doc, func(s string) {
			for _, tok := range tokenRE.FindAllString(s, -1) {
				if std, _ := normB64(tok); len(std) == 44 {
					tokens[std] = true
				}
			}
		})
	}
	var edOld, edNew []SigningKey
	var xOld, xNew []EncKey
	for _, tok := range slices.Sorted(mapsKeys(tokens)) {
		derived := B64(sha256Sum("agentmbx perturbed vectors\x00" + tok))
		if k, err := SigningKeyFromSeed(tok); err == nil && tokens[k.PublicKey()] {
			nk, _ := SigningKeyFromSeed(derived)
			edOld, edNew = append(edOld, k), append(edNew, nk)
		} else if e, err := EncKeyFromPrivate(tok); err == nil && tokens[e.PublicKey()] {
			ne, _ := EncKeyFromPrivate(derived)
			xOld, xNew = append(xOld, e), append(xNew, ne)
		}
	}
	byPub := func(a, b SigningKey) int { return strings.Compare(a.PublicKey(), b.PublicKey()) }
	slices.SortFunc(edOld, byPub)
	slices.SortFunc(edNew, byPub)
	for i, k := range edOld {
		p.keys[k.Seed()], p.keys[k.PublicKey()] = edNew[i].Seed(), edNew[i].PublicKey()
		p.old[k.PublicKey()], p.next[k.PublicKey()] = k, edNew[i]
	}
	byEnc := func(a, b EncKey) int { return strings.Compare(a.PublicKey(), b.PublicKey()) }
	slices.SortFunc(xOld, byEnc)
	slices.SortFunc(xNew, byEnc)
	for i, e := range xOld {
		p.keys[e.Private()], p.keys[e.PublicKey()] = xNew[i].Private(), xNew[i].PublicKey()
	}
	return p
}

func mapsKeys(m map[string]bool) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func sha256Sum(s string) []byte { h := sha256.Sum256([]byte(s)); return h[:] }

// walkStrings calls f on every string of v, map keys included, and on the strings of every
// string that holds JSON.
func walkStrings(v any, f func(string)) {
	switch x := v.(type) {
	case string:
		f(x)
		if strings.HasPrefix(x, "{") || strings.HasPrefix(x, "[") {
			if inner, err := ParseJSON([]byte(x)); err == nil {
				walkStrings(inner, f)
			}
		}
	case map[string]any:
		for k, e := range x {
			f(k)
			walkStrings(e, f)
		}
	case []any:
		for _, e := range x {
			walkStrings(e, f)
		}
	}
}

// candidates are the strings a signature or hash of case c may cover: its strings, the canonical
// form of each of its objects (nested JSON included) and the hop inputs its fields make.
func candidates(c any) []string {
	var out []string
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case string:
			out = append(out, x)
			if strings.HasPrefix(x, "{") || strings.HasPrefix(x, "[") {
				if inner, err := ParseJSON([]byte(x)); err == nil {
					walk(inner)
				}
			}
		case map[string]any:
			if b, err := Canonical(x); err == nil {
				out = append(out, string(b))
			}
			for _, e := range x {
				walk(e)
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		}
	}
	walk(c)
	return append(out, hopInputs(c)...)
}

// hopInputs are the LAN and relay hop signing inputs of a case with request fields.
func hopInputs(c any) []string {
	m, ok := c.(map[string]any)
	if !ok {
		return nil
	}
	str := func(k string) string { s, _ := m[k].(string); return s }
	method, body := str("method"), str("body")
	headers, _ := m["headers"].(map[string]any)
	ts, _ := headers[HeaderTS].(string)
	if method == "" || ts == "" {
		return nil
	}
	var out []string
	for _, raw := range []string{str("path"), str("request_url")} {
		u, err := url.Parse(raw)
		if raw == "" || err != nil {
			continue
		}
		for _, path := range []string{raw, RelaySignedPath(u), u.EscapedPath()} {
			out = append(out, string(RelayHopInput(method, path, ts, []byte(body))), string(LANHopInput(method, path, ts, []byte(body))))
		}
	}
	return out
}

// learn finds what the signatures, hashes, fingerprints and base64 values of case c cover.
// Signatures are found by signing every candidate with every key the case names (Ed25519 is
// deterministic), which is cheaper than verifying each signature against each candidate; a case
// that names no key is signed with the keys its family's earlier cases named (named).
func (p *perturber) learn(c any, named map[string]SigningKey) {
	cands := candidates(c)
	var toks []string
	signers := map[string]SigningKey{}
	walkStrings(c, func(s string) {
		for _, tok := range tokenRE.FindAllString(s, -1) {
			toks = append(toks, tok)
			std, _ := normB64(tok)
			if k, ok := p.old[std]; ok {
				signers[std], named[std] = k, k
			}
		}
	})
	if len(signers) == 0 {
		signers = named
	}
	for pub, k := range signers {
		for _, s := range cands {
			sig := k.Sign([]byte(s))
			if p.sigs[sig] == nil {
				p.sigs[sig] = &sigSource{pub, s}
			}
		}
	}
	for _, tok := range toks {
		p.learnToken(tok, cands)
	}
}

func (p *perturber) learnToken(tok string, cands []string) {
	find := func(m map[string]*string, key string, f func(string) string) {
		if m[key] != nil {
			return
		}
		for _, s := range cands {
			if f(s) == key {
				m[key] = &s
				return
			}
		}
	}
	switch std, _ := normB64(tok); {
	case hexToken.MatchString(tok):
		find(p.hashes, tok, func(s string) string { return SHA256Hex([]byte(s)) })
	case fpToken.MatchString(tok):
		find(p.fps, tok, Fingerprint)
	case len(tok) >= 8 && p.keys[std] == "" && p.sigs[std] == nil:
		if _, err := base64.StdEncoding.DecodeString(std); err == nil {
			find(p.b64s, std, func(s string) string {
				if s == std {
					return ""
				}
				return B64([]byte(s))
			})
		}
	}
}

func (p *perturber) rewriteValue(v any) any {
	switch x := v.(type) {
	case string:
		return p.rewrite(x)
	case json.Number:
		if n, err := x.Int64(); err == nil {
			if s, ok := p.shiftMS(n); ok {
				return json.Number(strconv.FormatInt(s, 10))
			}
		}
		return x
	}
	return v
}

func (p *perturber) shiftMS(ms int64) (int64, bool) {
	t := time.UnixMilli(ms)
	if t.Before(perturbTimeLo) || t.After(perturbTimeHi) {
		return ms, false
	}
	return t.Add(perturbShift).UnixMilli(), true
}

// rewrite is the perturbed form of one string.
func (p *perturber) rewrite(s string) string {
	if out, ok := p.memo[s]; ok {
		return out
	}
	out := isoTime.ReplaceAllStringFunc(s, shiftISO)
	out = tokenRE.ReplaceAllStringFunc(out, p.rewriteToken)
	p.memo[s] = out
	return out
}

func (p *perturber) rewriteToken(tok string) string {
	std, sp := normB64(tok)
	if n, ok := p.keys[std]; ok {
		return sp.spell(n)
	}
	if src := p.sigs[std]; src != nil {
		return sp.spell(p.next[src.pub].Sign([]byte(p.rewrite(src.msg))))
	}
	if pre := p.b64s[std]; pre != nil {
		return sp.spell(B64([]byte(p.rewrite(*pre))))
	}
	if pre := p.hashes[tok]; pre != nil {
		return SHA256Hex([]byte(p.rewrite(*pre)))
	}
	if pre := p.fps[tok]; pre != nil {
		return Fingerprint(p.rewrite(*pre))
	}
	if n, ok := perturbNames[tok]; ok {
		return n
	}
	if ms, err := strconv.ParseInt(tok, 10, 64); err == nil && len(tok) == 13 {
		if s, ok := p.shiftMS(ms); ok {
			return strconv.FormatInt(s, 10)
		}
		return tok
	}
	if ulidToken.MatchString(tok) && strings.ContainsAny(tok, "ABCDEFGHJKMNPQRSTVWXYZ") {
		return p.shiftULID(tok)
	}
	// A path or a dashed word: rename its parts.
	return wordRE.ReplaceAllStringFunc(tok, func(part string) string {
		if n, ok := perturbNames[part]; ok && strings.ContainsAny(tok, "/+-_") {
			return n
		}
		return part
	})
}

// shiftISO moves an ISO-8601 time in the set's years by perturbShift, keeping how it is written
// (fraction digits, Z or offset).
func shiftISO(iso string) string {
	m := isoTime.FindStringSubmatch(iso)
	t, err := time.Parse(time.RFC3339Nano, iso)
	if err != nil || t.Before(perturbTimeLo) || t.After(perturbTimeHi) {
		return iso
	}
	return t.Add(perturbShift).Format("2006-01-02T15:04:05") + m[2] + m[3]
}

// shiftULID moves the time part of a ULID (or of a bare 10-character time prefix).
func (p *perturber) shiftULID(tok string) string {
	var ms int64
	for _, c := range tok[:10] {
		ms = ms*32 + int64(strings.IndexRune(crockford, c))
	}
	s, ok := p.shiftMS(ms)
	if !ok {
		return tok
	}
	var prefix [10]byte
	for i := 9; i >= 0; i-- {
		prefix[i] = crockford[s%32]
		s /= 32
	}
	return string(prefix[:]) + tok[10:]
}

// checkPerturbed makes sure the copy really is another set: in every perturbed family the case
// count differs and no public-set name, key, or time of 2026-03 is left in a case.
func checkPerturbed(src, dst string) error {
	files, err := filepath.Glob(filepath.Join(src, "*.json"))
	if err != nil {
		return err
	}
	for _, f := range files {
		name := filepath.Base(f)
		if _, keep := perturbKeep[name]; keep {
			continue
		}
		a, errA := os.ReadFile(f)
		b, errB := os.ReadFile(filepath.Join(dst, name))
		if errA != nil || errB != nil {
			return fmt.Errorf("%s: %v %v", name, errA, errB)
		}
		var fa, fb struct {
			Cases []map[string]any `json:"cases"`
		}
		if err := json.Unmarshal(a, &fa); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if err := json.Unmarshal(b, &fb); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if len(fa.Cases) >= 3 && len(fa.Cases) == len(fb.Cases) {
			return fmt.Errorf("%s: the copy has the same %d cases", name, len(fa.Cases))
		}
		var left []string
		for _, c := range fb.Cases {
			delete(c, "name")
			delete(c, "note")
			walkStrings(map[string]any(c), func(s string) {
				for _, tok := range tokenRE.FindAllString(s, -1) {
					if _, ok := perturbNames[tok]; ok {
						left = append(left, tok)
					}
				}
				if strings.Contains(s, "2026-03-") {
					left = append(left, s)
				}
			})
		}
		if len(left) > 0 {
			return fmt.Errorf("%s: the copy still holds %q", name, left)
		}
	}
	return nil
}
