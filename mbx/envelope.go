package mbx

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Limits of an envelope, as the original enforces them on input from the network. Lengths of
// text are counted in UTF-16 code units (JavaScript's String length), sizes of bodies in UTF-8
// bytes.
const (
	EnvelopeVersion = 3
	MaxBody         = 256 * 1024 // plaintext body, bytes
	// MaxSealedBody is the largest sealed body field: the base64 of a MaxBody plaintext plus the
	// 16-byte tag.
	MaxSealedBody = 4 * ((MaxBody + 16 + 2) / 3)
	MaxSubject    = 200  // subject, UTF-16 units
	MaxRecipients = 100  // entries of to
	MaxField      = 300  // from, each to, thread, reply_to, meta.project, meta.project_key
	MaxRefs       = 100  // entries of refs
	MaxRef        = 2048 // each ref
	MaxRelayDepth = 1000 // meta.hop: a saturating relay counter
	MaxLocalNames = 100  // entries of meta.local_names
)

// Enc and signature constants.
const (
	EncVersion = 1
	EncAlg     = "x25519+xchacha20poly1305"
	SigAlg     = "ed25519"
)

// Kind is what an envelope asks of its recipient.
type Kind string

// The kinds of the protocol.
const (
	KindMessage  Kind = "message"
	KindRequest  Kind = "request"
	KindReply    Kind = "reply"
	KindStatus   Kind = "status"
	KindDecision Kind = "decision"
	KindAlert    Kind = "alert"
	KindTask     Kind = "task"
)

// Kinds lists every kind, in the original's order.
var Kinds = []Kind{KindMessage, KindRequest, KindReply, KindStatus, KindDecision, KindAlert, KindTask}

func (k Kind) String() string { return string(k) }

// Valid reports whether k is one of Kinds.
func (k Kind) Valid() bool { return slices.Contains(Kinds, k) }

// Envelope is a v3 message envelope:
//
//	{v:3, id, ts, from, to[], thread, reply_to|null, kind, subject, body, needs_reply, refs[],
//	 meta, authority|null, enc|null, sig:{alg, host, key, value}}
//
// Meta and Authority are kept as the JSON received or built, so keys this package does not know
// survive and are signed exactly. When Enc is set, Body on the wire is the same base64 ciphertext
// as Enc.Body, and in local storage it is the opened plaintext; the signature covers Enc.Body and
// never the Body field, so both forms verify.
type Envelope struct {
	ID         string
	TS         string // ISO-8601 as signed; see Time
	From       string // agent@host of the sender
	To         []string
	Thread     string
	ReplyTo    *string // nil is JSON null
	Kind       Kind
	Subject    string
	Body       string
	NeedsReply bool
	Refs       []string
	Meta       json.RawMessage // a JSON object; see Metadata and SetMeta
	Authority  json.RawMessage // nil is JSON null; owner authority, checked by its own rules
	Enc        *Enc            // nil is JSON null (a plaintext envelope)
	Sig        *Sig            // nil when unsigned, or when the received sig was not an object of strings

	extra []rawField // top-level members this package does not know, as received (signed with the rest)
	raw   []byte     // the exact bytes received, or produced when first sealed
}

// Enc is a sealed body: X25519 to the recipient host's enc key, HKDF-SHA256, XChaCha20-Poly1305.
// On the wire it also carries v:1 and alg:"x25519+xchacha20poly1305".
type Enc struct {
	EPK   string // base64 ephemeral X25519 public key, 32 bytes
	Nonce string // base64 24-byte nonce
	Body  string // base64 ciphertext followed by the 16-byte tag

	extra []rawField
}

// Sig is the sending host's signature.
type Sig struct {
	Alg   string `json:"alg"`   // "ed25519"
	Host  string `json:"host"`  // the sending host's name
	Key   string `json:"key"`   // fingerprint of the sending host's key
	Value string `json:"value"` // base64 Ed25519 signature of SigningInput
}

// rawField is one JSON member kept as received.
type rawField struct {
	Key   string
	Value json.RawMessage
}

// Time parses TS.
func (e *Envelope) Time() (time.Time, error) { return ParseISOTime(e.TS) }

// Raw returns the exact bytes the envelope was parsed from, or for an envelope returned by Seal
// the bytes that sealing produced: the relay wire bytes, to persist and resend as they are. It is
// nil for an envelope built or changed in memory. Raw is never re-derived from the fields.
func (e *Envelope) Raw() []byte { return e.raw }

// clone copies e deeply enough that changing the copy's fields or slices leaves e alone.
func (e *Envelope) clone() *Envelope {
	c := *e
	c.To = slices.Clone(e.To)
	c.Refs = slices.Clone(e.Refs)
	if e.ReplyTo != nil {
		r := *e.ReplyTo
		c.ReplyTo = &r
	}
	if e.Enc != nil {
		enc := *e.Enc
		c.Enc = &enc
	}
	if e.Sig != nil {
		s := *e.Sig
		c.Sig = &s
	}
	c.raw = nil
	return &c
}

// ---- building ---------------------------------------------------------------------------------

// Draft is what a sender asks for; Build makes the envelope. The JSON names are those of the
// original's build input.
type Draft struct {
	From       string   `json:"from"`
	To         []string `json:"to"`
	Subject    string   `json:"subject"`
	Body       string   `json:"body"`
	Kind       Kind     `json:"kind,omitempty"`        // "" is message
	Thread     string   `json:"thread,omitempty"`      // "" starts a thread: the envelope's own id
	ReplyTo    string   `json:"reply_to,omitempty"`    // "" is null
	NeedsReply bool     `json:"needs_reply,omitempty"` //
	Refs       []string `json:"refs,omitempty"`
	// Origin "external" marks content that came from outside the agents (a web page, an issue, an
	// email relayed by an agent): meta gets origin, external_since (the envelope's ts) and
	// external_source "declared". Any other value adds nothing.
	Origin string `json:"origin,omitempty"`
	// Hop is the agent-to-agent relay depth; 0 is left out of meta.
	Hop int `json:"hop,omitempty"`
	// Project is the sender's project root and ProjectKey its normalized git origin; each is cut to
	// 300 UTF-16 units.
	Project    string `json:"project,omitempty"`
	ProjectKey string `json:"project_key,omitempty"`
	// UnverifiedSender sets meta.sender_verification to "unverified".
	UnverifiedSender bool `json:"unverifiedSender,omitempty"`
}

// IDSource makes message ids; *ULIDs is one.
type IDSource interface {
	New(now time.Time) string
}

// Build makes an unsigned plaintext envelope from d, as the original's buildEnvelope does: the id
// comes from ids, ts is now in toISOString form, the thread defaults to the id, the subject is put
// on one line (control characters, DEL, U+0085, U+2028 and U+2029 become spaces) and cut to 200
// UTF-16 units, and meta holds what ParseBodyMeta finds in the body followed by the draft's
// optional fields. The result passes Check.
func Build(d Draft, now time.Time, ids IDSource) (*Envelope, error) {
	if jsBlank(d.Subject) {
		return nil, fmt.Errorf("build envelope: %w: subject is required", ErrBadDraft)
	}
	if len(d.Body) > MaxBody {
		return nil, fmt.Errorf("build envelope: %w: body is over %d KB; put large content in refs", ErrBadDraft, MaxBody/1024)
	}
	if len(d.To) == 0 {
		return nil, fmt.Errorf("build envelope: %w: at least one recipient is required", ErrBadDraft)
	}
	for _, s := range slices.Concat([]string{d.From, d.Subject, d.Body, d.Thread, d.ReplyTo, d.Origin, d.Project, d.ProjectKey}, d.To, d.Refs) {
		if !utf8.ValidString(s) {
			return nil, fmt.Errorf("build envelope: %w: text is not valid UTF-8", ErrBadDraft)
		}
	}
	id := ids.New(now)
	ts := ISOTime(now)
	e := &Envelope{
		ID:         id,
		TS:         ts,
		From:       d.From,
		To:         slices.Clone(d.To),
		Thread:     d.Thread,
		Kind:       d.Kind,
		Subject:    cutUTF16(OneLine(d.Subject), MaxSubject),
		Body:       d.Body,
		NeedsReply: d.NeedsReply,
		Refs:       slices.Clone(d.Refs),
	}
	if e.Thread == "" {
		e.Thread = id
	}
	if d.ReplyTo != "" {
		r := d.ReplyTo
		e.ReplyTo = &r
	}
	if e.Kind == "" {
		e.Kind = KindMessage
	}
	if e.Refs == nil {
		e.Refs = []string{}
	}
	meta, err := buildMeta(d, ts)
	if err != nil {
		return nil, fmt.Errorf("build envelope: %w: %w", ErrBadDraft, err)
	}
	e.Meta = meta
	if err := e.Check(); err != nil {
		return nil, fmt.Errorf("build envelope: %w: %w", ErrBadDraft, err)
	}
	return e, nil
}

// buildMeta writes meta in the original's key order: the body's mentions, directives, tags and
// task_refs, then sender_verification, origin (with external_since and external_source), hop,
// project and project_key when the draft sets them.
func buildMeta(d Draft, ts string) (json.RawMessage, error) {
	bm := ParseBodyMeta(d.Body)
	var b []byte
	var err error
	member := func(key string, first bool) {
		if !first {
			b = append(b, ',')
		}
		b, _ = appendJSString(b, key) // keys are ASCII constants
		b = append(b, ':')
	}
	list := func(key string, xs []string, first bool) {
		member(key, first)
		if err == nil {
			b, err = appendJSStrings(b, xs)
		}
	}
	str := func(key, v string) {
		member(key, false)
		if err == nil {
			b, err = appendJSString(b, v)
		}
	}
	b = append(b, '{')
	list("mentions", bm.Mentions, true)
	list("directives", bm.Directives, false)
	list("tags", bm.Tags, false)
	list("task_refs", bm.TaskRefs, false)
	if d.UnverifiedSender {
		str("sender_verification", "unverified")
	}
	if d.Origin == "external" {
		str("origin", "external")
		str("external_since", ts)
		str("external_source", "declared")
	}
	if d.Hop != 0 {
		member("hop", false)
		b = strconv.AppendInt(b, int64(d.Hop), 10)
	}
	if d.Project != "" {
		str("project", cutUTF16(d.Project, MaxField))
	}
	if d.ProjectKey != "" {
		str("project_key", cutUTF16(d.ProjectKey, MaxField))
	}
	b = append(b, '}')
	if err != nil {
		return nil, err
	}
	return b, nil
}

// BodyMeta is what the original reads out of a message body.
type BodyMeta struct {
	Mentions   []string // @name or @name@host, lowercased
	Directives []string // /claim /done /blocked /approve /decision /checkin
	Tags       []string // #tag, lowercased
	TaskRefs   []string // T12 … T123456
}

// jsSpace is JavaScript's \s: WhiteSpace and LineTerminator.
const jsSpace = `\t\n\v\f\r \x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000}\x{feff}`

// The body scanners. Case-insensitive classes are spelled out as ASCII: JavaScript's /i without /u
// folds only ASCII here, while Go's (?i) would also fold 'ſ' and the Kelvin sign.
var (
	mentionRE   = regexp.MustCompile(`(?:^|[` + jsSpace + `(])@([a-zA-Z0-9][a-zA-Z0-9-]{1,39}(?:@[a-zA-Z0-9-]+)?)`)
	directiveRE = regexp.MustCompile(`(?:^|[` + jsSpace + `])/(claim|done|blocked|approve|decision|checkin)\b`)
	tagRE       = regexp.MustCompile(`(?:^|[` + jsSpace + `])#([a-zA-Z][a-zA-Z0-9_-]{1,40})`)
	taskRefRE   = regexp.MustCompile(`\b(T[0-9]{2,6})\b`)
)

// ParseBodyMeta finds mentions, directives, tags and task references in a body, each list in the
// order of first appearance without repeats. Mentions and tags are lowercased after the repeats
// are removed, as the original does (so "@Bob @bob" gives ["bob","bob"]).
func ParseBodyMeta(body string) BodyMeta {
	all := func(re *regexp.Regexp) []string {
		out := []string{}
		for _, m := range re.FindAllStringSubmatch(body, -1) {
			if !slices.Contains(out, m[1]) {
				out = append(out, m[1])
			}
		}
		return out
	}
	lower := func(xs []string) []string {
		for i := range xs {
			xs[i] = strings.ToLower(xs[i])
		}
		return xs
	}
	return BodyMeta{
		Mentions:   lower(all(mentionRE)),
		Directives: all(directiveRE),
		Tags:       lower(all(tagRE)),
		TaskRefs:   all(taskRefRE),
	}
}

// isControl reports the characters a subject may not hold: C0 controls, DEL, U+0085 (NEL), U+2028
// and U+2029, all of which could make sender text look like header lines.
func isControl(r rune) bool {
	return r <= 0x1f || r == 0x7f || r == 0x85 || r == 0x2028 || r == 0x2029
}

// OneLine replaces every control character (see the subject rule) with a space.
func OneLine(s string) string {
	return strings.Map(func(r rune) rune {
		if isControl(r) {
			return ' '
		}
		return r
	}, s)
}

// jsBlank reports whether JavaScript's s.trim() is empty.
func jsBlank(s string) bool {
	for _, r := range s {
		switch {
		case r == '\t', r == '\n', r == '\v', r == '\f', r == '\r', r == ' ', r == 0xa0, r == 0xfeff,
			r == 0x2028, r == 0x2029, unicode.Is(unicode.Zs, r):
		default:
			return false
		}
	}
	return true
}

// ---- metadata ---------------------------------------------------------------------------------

// Meta is the typed view of the known meta keys. Absent keys are zero.
type Meta struct {
	Mentions           []string
	Directives         []string
	Tags               []string
	TaskRefs           []string
	SenderVerification string // "", "unverified" or "leased"
	Origin             string // "", "agent" or "external"
	ExternalSince      string
	ExternalSource     string
	Hop                int
	Project            string
	ProjectKey         string
	LocalNames         []string // bare to entries the sending host delivered to its own agents
}

// Metadata reads the known keys of e.Meta. Keys of an unexpected type read as absent; the shape
// check has already refused wrong types of the keys it checks.
func (e *Envelope) Metadata() (Meta, error) {
	t, err := ParseJSON(e.Meta)
	if err != nil {
		return Meta{}, fmt.Errorf("envelope meta: %w", err)
	}
	m, ok := t.(map[string]any)
	if !ok {
		return Meta{}, fmt.Errorf("envelope meta: %w", &ShapeError{Field: "meta", Reason: "bad meta"})
	}
	strs := func(k string) []string {
		a, _ := m[k].([]any)
		var out []string
		for _, v := range a {
			if s, ok := v.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	str := func(k string) string { s, _ := m[k].(string); return s }
	md := Meta{
		Mentions: strs("mentions"), Directives: strs("directives"), Tags: strs("tags"), TaskRefs: strs("task_refs"),
		SenderVerification: str("sender_verification"), Origin: str("origin"),
		ExternalSince: str("external_since"), ExternalSource: str("external_source"),
		Project: str("project"), ProjectKey: str("project_key"), LocalNames: strs("local_names"),
	}
	if f, ok := jsNumber(m["hop"]); ok && f == float64(int(f)) {
		md.Hop = int(f)
	}
	return md, nil
}

// SetMeta sets one meta key as a JavaScript assignment does: an existing key keeps its place and
// takes the new value, a new key goes last. value is any value Canonical accepts. It refuses an
// envelope that is sealed or signed: changing meta would break the signature.
func (e *Envelope) SetMeta(key string, value any) error {
	if e.Sig != nil || e.Enc != nil {
		return fmt.Errorf("envelope set meta %q: %w: envelope is already signed or sealed", key, ErrBadDraft)
	}
	v, err := Canonical(value)
	if err != nil {
		return fmt.Errorf("envelope set meta %q: %w", key, err)
	}
	keys, vals, err := decodeObjectRaw(e.Meta)
	if err != nil {
		return fmt.Errorf("envelope set meta %q: %w", key, &ShapeError{Field: "meta", Reason: "bad meta"})
	}
	if _, ok := vals[key]; !ok {
		keys = append(keys, key)
	}
	vals[key] = v
	out, err := appendJSObject(nil, keys, vals)
	if err != nil {
		return fmt.Errorf("envelope set meta %q: %w", key, err)
	}
	e.Meta, e.raw = out, nil
	return nil
}

// ---- shape ------------------------------------------------------------------------------------

// Check runs the original's structural check (checkShape) on e. It returns nil or a *ShapeError.
func (e *Envelope) Check() error {
	b, err := e.Marshal()
	if err != nil {
		return &ShapeError{Field: "", Reason: "cannot be encoded: " + err.Error()}
	}
	_, err = parseEnvelope(b, false)
	return err
}

// getter returns a top-level member as JSON.parse would build it, and whether it is present.
type getter func(key string) (any, bool)

// checkShape is the original's checkShape over a parsed envelope, in its order, so that the first
// refusal (and its reason) is the same.
func checkShape(get getter) *ShapeError {
	bad := func(field, reason string) *ShapeError { return &ShapeError{Field: field, Reason: reason} }
	if v, _ := get("v"); !isJSNumber(v, EnvelopeVersion) {
		return bad("v", "unsupported version")
	}
	if id, _ := get("id"); !isStringWhere(id, ValidULID) {
		return bad("id", "bad id")
	}
	from, _ := get("from")
	if !isStringWhere(from, func(s string) bool { return strings.Contains(s, "@") }) {
		return bad("from", "bad from")
	}
	if utf16Len(from.(string)) > MaxField {
		return bad("from", fmt.Sprintf("from over %d characters", MaxField))
	}
	toV, _ := get("to")
	to, ok := stringList(toV)
	if !ok || len(to) == 0 {
		return bad("to", "bad to")
	}
	if len(to) > MaxRecipients {
		return bad("to", fmt.Sprintf("more than %d recipients", MaxRecipients))
	}
	for _, t := range to {
		if utf16Len(t) > MaxField {
			return bad("to", fmt.Sprintf("recipient over %d characters", MaxField))
		}
	}
	if k, _ := get("kind"); !isStringWhere(k, func(s string) bool { return Kind(s).Valid() }) {
		return bad("kind", "bad kind")
	}
	encV, hasEnc := get("enc")
	if !hasEnc {
		return bad("enc", "bad enc")
	}
	body, ok := get("body")
	if _, isStr := body.(string); !ok || !isStr {
		return bad("body", "bad body")
	}
	maxBody := MaxBody
	if encV != nil {
		maxBody = MaxSealedBody // the wire form of a sealed body is its base64 ciphertext
	}
	if len(body.(string)) > maxBody {
		return bad("body", fmt.Sprintf("body over %d bytes", maxBody))
	}
	subj, _ := get("subject")
	s, ok := subj.(string)
	if !ok {
		return bad("subject", "bad subject")
	}
	if utf16Len(s) > MaxSubject {
		return bad("subject", fmt.Sprintf("subject over %d characters", MaxSubject))
	}
	if strings.IndexFunc(s, isControl) >= 0 {
		return bad("subject", "subject contains control characters")
	}
	if ts, _ := get("ts"); !isStringWhere(ts, jsDateParses) {
		return bad("ts", "bad ts")
	}
	if th, _ := get("thread"); !isStringWhere(th, func(s string) bool { return utf16Len(s) <= MaxField }) {
		return bad("thread", "bad thread")
	}
	if rt, ok := get("reply_to"); !ok || (rt != nil && !isStringWhere(rt, func(s string) bool { return utf16Len(s) <= MaxField })) {
		return bad("reply_to", "bad reply_to")
	}
	if nr, _ := get("needs_reply"); !isBool(nr) {
		return bad("needs_reply", "bad needs_reply")
	}
	refsV, _ := get("refs")
	refs, ok := stringList(refsV)
	if !ok {
		return bad("refs", "bad refs")
	}
	if len(refs) > MaxRefs || slices.ContainsFunc(refs, func(r string) bool { return utf16Len(r) > MaxRef }) {
		return bad("refs", fmt.Sprintf("more than %d refs or a ref over %d characters", MaxRefs, MaxRef))
	}
	if encV != nil {
		if se := checkEnc(encV); se != nil {
			return se
		}
		if b, _ := encV.(map[string]any)["body"].(string); utf16Len(b) > MaxSealedBody {
			return bad("enc.body", fmt.Sprintf("sealed body over %d bytes", MaxSealedBody))
		}
	}
	if a, ok := get("authority"); !ok || a != nil {
		if se := checkAuthority(a); se != nil {
			return se
		}
	}
	m, _ := get("meta")
	return checkMeta(m)
}

// checkEnc is the original's checkEnc: the structure of enc v1, checked before any decryption.
func checkEnc(x any) *ShapeError {
	bad := func(field, reason string) *ShapeError { return &ShapeError{Field: field, Reason: reason} }
	if _, isArr := x.([]any); isArr {
		return bad("enc.v", "unsupported enc version") // an array is an object without v
	}
	e, ok := x.(map[string]any)
	if !ok {
		return bad("enc", "bad enc")
	}
	if !isJSNumber(e["v"], EncVersion) {
		return bad("enc.v", "unsupported enc version")
	}
	if alg, _ := e["alg"].(string); alg != EncAlg {
		return bad("enc.alg", "unsupported enc algorithm")
	}
	if !isB64Len(e["epk"], 32) {
		return bad("enc.epk", "bad enc epk")
	}
	if !isB64Len(e["nonce"], 24) {
		return bad("enc.nonce", "bad enc nonce")
	}
	if b, _ := e["body"].(string); b == "" {
		return bad("enc.body", "bad enc body")
	}
	return nil
}

// checkAuthority checks the two forms of owner authority: {owner_sig, owner_fp} or
// {grant:{v:2, id, iss, sub, agent, host, caps[], iat, exp, nonce, sig}, session_sig}.
func checkAuthority(x any) *ShapeError {
	a, ok := x.(map[string]any)
	if !ok {
		return &ShapeError{Field: "authority", Reason: "bad authority"}
	}
	if ownerSig, has := a["owner_sig"]; has {
		_, sigStr := ownerSig.(string)
		_, fpStr := a["owner_fp"].(string)
		_, hasGrant := a["grant"]
		_, hasSession := a["session_sig"]
		if !sigStr || !fpStr || hasGrant || hasSession {
			return &ShapeError{Field: "authority", Reason: "bad owner authority"}
		}
		return nil
	}
	g, gOK := a["grant"].(map[string]any)
	_, sessStr := a["session_sig"].(string)
	_, hasFP := a["owner_fp"]
	if !gOK || !isJSNumber(g["v"], 2) || !sessStr || hasFP {
		return &ShapeError{Field: "authority.grant", Reason: "bad grant authority"}
	}
	for _, f := range []string{"id", "iss", "sub", "agent", "host", "iat", "exp", "nonce", "sig"} {
		if _, ok := g[f].(string); !ok {
			return &ShapeError{Field: "authority.grant." + f, Reason: "bad grant." + f}
		}
	}
	if _, ok := stringList(g["caps"]); !ok {
		return &ShapeError{Field: "authority.grant.caps", Reason: "bad grant.caps"}
	}
	return nil
}

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{1,39}$`)

// checkMeta checks the keys of meta the original knows; other keys are free.
func checkMeta(x any) *ShapeError {
	m, ok := x.(map[string]any)
	if !ok {
		return &ShapeError{Field: "meta", Reason: "bad meta"}
	}
	for _, f := range []string{"mentions", "directives", "tags", "task_refs"} {
		if _, ok := stringList(m[f]); !ok {
			return &ShapeError{Field: "meta." + f, Reason: "bad meta." + f}
		}
	}
	if v, has := m["sender_verification"]; has && v != "unverified" && v != "leased" {
		return &ShapeError{Field: "meta.sender_verification", Reason: "bad sender verification"}
	}
	if v, has := m["hop"]; has {
		f, ok := jsNumber(v)
		if !ok || f != float64(int64(f)) || f < 0 || f > MaxRelayDepth {
			return &ShapeError{Field: "meta.hop", Reason: "bad hop"}
		}
	}
	if v, has := m["origin"]; has && v != "agent" && v != "external" {
		return &ShapeError{Field: "meta.origin", Reason: "bad origin"}
	}
	short := func(s string) bool { return utf16Len(s) <= MaxField }
	if v, has := m["project"]; has && !isStringWhere(v, short) {
		return &ShapeError{Field: "meta.project", Reason: "bad project"}
	}
	if v, has := m["project_key"]; has && !isStringWhere(v, short) {
		return &ShapeError{Field: "meta.project_key", Reason: "bad project key"}
	}
	if v, has := m["local_names"]; has {
		names, ok := stringList(v)
		if !ok || len(names) > MaxLocalNames || slices.ContainsFunc(names, func(n string) bool { return !nameRE.MatchString(n) }) {
			return &ShapeError{Field: "meta.local_names", Reason: "bad local names"}
		}
	}
	return nil
}

func isStringWhere(v any, ok func(string) bool) bool {
	s, isStr := v.(string)
	return isStr && ok(s)
}

func isBool(v any) bool { _, ok := v.(bool); return ok }

// jsNumber is v as a JavaScript number, if it is one.
func jsNumber(v any) (float64, bool) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, false
	}
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return 0, false
	}
	return f, true
}

func isJSNumber(v any, want float64) bool {
	f, ok := jsNumber(v)
	return ok && f == want
}

// stringList is v as an array of strings, if it is one.
func stringList(v any) ([]string, bool) {
	a, ok := v.([]any)
	if !ok {
		return nil, false
	}
	out := make([]string, len(a))
	for i, x := range a {
		if out[i], ok = x.(string); !ok {
			return nil, false
		}
	}
	return out, true
}

// isB64Len is the original's test of an enc field: base64 (decoded as Node does) of n bytes.
func isB64Len(v any, n int) bool {
	s, ok := v.(string)
	if !ok {
		return false
	}
	b, err := DecodeB64Lenient(s)
	return err == nil && len(b) == n
}

// jsDateParses reports whether Date.parse(s) is a number, for the forms a host writes: the ISO
// forms (with or without zone) and the RFC 1123 form of toUTCString.
func jsDateParses(s string) bool {
	if _, err := ParseISOTime(s); err == nil {
		return true
	}
	for _, layout := range []string{"2006-01-02T15:04:05.999999999", "2006-01-02T15:04", "2006-01", "2006", time.RFC1123, time.RFC1123Z} {
		if _, err := time.Parse(layout, s); err == nil {
			return true
		}
	}
	return false
}

// ---- signing ----------------------------------------------------------------------------------

// signingTree is the envelope without sig, with body replaced by enc.body when enc is set: the
// value whose canonical JSON the host key signs.
func (e *Envelope) signingTree() map[string]any {
	t := map[string]any{
		"v":           json.Number(strconv.Itoa(EnvelopeVersion)),
		"id":          e.ID,
		"ts":          e.TS,
		"from":        e.From,
		"to":          anyList(e.To),
		"thread":      e.Thread,
		"reply_to":    nil,
		"kind":        string(e.Kind),
		"subject":     e.Subject,
		"body":        e.Body,
		"needs_reply": e.NeedsReply,
		"refs":        anyList(e.Refs),
		"meta":        rawOrNull(e.Meta),
		"authority":   rawOrNull(e.Authority),
		"enc":         nil,
	}
	if e.ReplyTo != nil {
		t["reply_to"] = *e.ReplyTo
	}
	if e.Enc != nil {
		enc := map[string]any{
			"v": json.Number(strconv.Itoa(EncVersion)), "alg": EncAlg,
			"epk": e.Enc.EPK, "nonce": e.Enc.Nonce, "body": e.Enc.Body,
		}
		for _, f := range e.Enc.extra {
			enc[f.Key] = f.Value
		}
		t["enc"] = enc
		t["body"] = e.Enc.Body
	}
	for _, f := range e.extra {
		t[f.Key] = f.Value
	}
	return t
}

func anyList(xs []string) []any {
	out := make([]any, len(xs))
	for i, x := range xs {
		out[i] = x
	}
	return out
}

func rawOrNull(r json.RawMessage) any {
	if len(bytes.TrimSpace(r)) == 0 {
		return nil
	}
	return r
}

// SigningInput is what the host signature covers: canonical(envelope without sig, with body =
// enc.body when enc is set). For a parsed envelope it is computed from what was received,
// members unknown to this package included, so a member added after signing breaks the signature.
func (e *Envelope) SigningInput() ([]byte, error) {
	b, err := Canonical(e.signingTree())
	if err != nil {
		return nil, fmt.Errorf("envelope %s signing input: %w", e.ID, err)
	}
	return b, nil
}

// Sign sets e.Sig: host k's signature over SigningInput, naming host and k's fingerprint.
func (e *Envelope) Sign(host string, k SigningKey) error {
	if k.IsZero() {
		return fmt.Errorf("sign envelope %s: %w: no signing key", e.ID, ErrBadKey)
	}
	in, err := e.SigningInput()
	if err != nil {
		return fmt.Errorf("sign envelope: %w", err)
	}
	e.Sig = &Sig{Alg: SigAlg, Host: host, Key: k.Fingerprint(), Value: k.Sign(in)}
	e.raw = nil
	return nil
}

// Verify checks that e was sent and signed by host, whose pinned key is pubB64: sig.host is host
// and from is <agent>@host (else ErrSenderMismatch); sig.alg is exactly "ed25519", sig.key is the
// key's fingerprint, and sig.value verifies over SigningInput (else ErrBadSignature).
func (e *Envelope) Verify(host, pubB64 string) error {
	if e.Sig == nil {
		return fmt.Errorf("verify envelope %s: %w: no host signature", e.ID, ErrBadSignature)
	}
	if e.Sig.Host != host {
		return fmt.Errorf("verify envelope %s: %w: signed as host %q, received from %q", e.ID, ErrSenderMismatch, e.Sig.Host, host)
	}
	if agent, ok := strings.CutSuffix(e.From, "@"+host); !ok || agent == "" || strings.Contains(agent, "@") {
		return fmt.Errorf("verify envelope %s: %w: from %q is not an agent of %q", e.ID, ErrSenderMismatch, e.From, host)
	}
	if e.Sig.Alg != SigAlg {
		return fmt.Errorf("verify envelope %s: %w: sig.alg %q is not %q", e.ID, ErrBadSignature, e.Sig.Alg, SigAlg)
	}
	if fp := Fingerprint(pubB64); e.Sig.Key != fp {
		return fmt.Errorf("verify envelope %s: %w: sig.key %q is not the pinned key %s", e.ID, ErrBadSignature, e.Sig.Key, fp)
	}
	in, err := e.SigningInput()
	if err != nil {
		return fmt.Errorf("verify envelope %s: %w: %w", e.ID, ErrBadSignature, err)
	}
	if !Verify(pubB64, in, e.Sig.Value) {
		return fmt.Errorf("verify envelope %s: %w: signature does not verify", e.ID, ErrBadSignature)
	}
	return nil
}

// ---- encoding ---------------------------------------------------------------------------------

// Marshal encodes e as the original's JSON.stringify does for an envelope it built: no
// whitespace, JavaScript string escaping and numbers, members in the order
//
//	v id ts from to thread reply_to kind subject body needs_reply refs meta authority enc sig
//
// (enc as v alg epk nonce body; sig as alg host key value), meta and authority in their own
// order. Members received but unknown to this package follow enc. For bytes that were received
// or first sealed, use Raw: they are what was signed and sent.
func (e *Envelope) Marshal() ([]byte, error) {
	b := make([]byte, 0, 512+len(e.Body)+len(e.Meta))
	var err error
	str := func(key, v string, first bool) {
		if err != nil {
			return
		}
		if !first {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = append(b, key...)
		b = append(b, '"', ':')
		b, err = appendJSString(b, v)
	}
	strs := func(key string, xs []string) {
		if err != nil {
			return
		}
		b = append(b, ",\""+key+"\":"...)
		b, err = appendJSStrings(b, xs)
	}
	raw := func(key string, r json.RawMessage) {
		if err != nil {
			return
		}
		b = append(b, ',')
		if b, err = appendJSString(b, key); err != nil {
			return
		}
		b = append(b, ':')
		if len(bytes.TrimSpace(r)) == 0 {
			b = append(b, "null"...)
			return
		}
		b, err = appendJSValue(b, r)
	}
	b = append(b, `{"v":3`...)
	str("id", e.ID, false)
	str("ts", e.TS, false)
	str("from", e.From, false)
	strs("to", e.To)
	str("thread", e.Thread, false)
	if e.ReplyTo != nil {
		str("reply_to", *e.ReplyTo, false)
	} else {
		b = append(b, `,"reply_to":null`...)
	}
	str("kind", string(e.Kind), false)
	str("subject", e.Subject, false)
	str("body", e.Body, false)
	b = append(b, `,"needs_reply":`...)
	b = strconv.AppendBool(b, e.NeedsReply)
	strs("refs", e.Refs)
	raw("meta", e.Meta)
	raw("authority", e.Authority)
	if e.Enc == nil {
		b = append(b, `,"enc":null`...)
	} else {
		b = append(b, `,"enc":{"v":1`...)
		str("alg", EncAlg, false)
		str("epk", e.Enc.EPK, false)
		str("nonce", e.Enc.Nonce, false)
		str("body", e.Enc.Body, false)
		for _, f := range e.Enc.extra {
			raw(f.Key, f.Value)
		}
		b = append(b, '}')
	}
	for _, f := range e.extra {
		raw(f.Key, f.Value)
	}
	if e.Sig != nil {
		b = append(b, `,"sig":{`...)
		str("alg", e.Sig.Alg, true)
		str("host", e.Sig.Host, false)
		str("key", e.Sig.Key, false)
		str("value", e.Sig.Value, false)
		b = append(b, '}')
	}
	b = append(b, '}')
	if err != nil {
		return nil, fmt.Errorf("marshal envelope %s: %w", e.ID, err)
	}
	return b, nil
}

// MarshalJSON is Marshal, so an envelope nests in other JSON (note that encoding/json re-escapes
// '<', '>' and '&' in it; the signature covers canonical JSON, so it still verifies).
func (e *Envelope) MarshalJSON() ([]byte, error) { return e.Marshal() }

// UnmarshalJSON is ParseEnvelope.
func (e *Envelope) UnmarshalJSON(data []byte) error {
	p, err := ParseEnvelope(data)
	if err != nil {
		return err
	}
	*e = *p
	return nil
}

// ---- parsing ----------------------------------------------------------------------------------

// knownMembers are the top-level members of a v3 envelope.
var knownMembers = []string{"v", "id", "ts", "from", "to", "thread", "reply_to", "kind", "subject", "body", "needs_reply", "refs", "meta", "authority", "enc", "sig"}

// ParseEnvelope reads envelope bytes as the original's receiver does: JSON.parse (the last of
// duplicate members wins), then checkShape. A shape failure is a *ShapeError (ErrBadEnvelope)
// naming the field. The sig member is not part of the shape: when it is missing or not an object
// of four strings, Sig is nil and Verify refuses the envelope. The bytes are kept (Raw), and
// members this package does not know are kept and signed with the rest.
func ParseEnvelope(data []byte) (*Envelope, error) {
	return parseEnvelope(data, true)
}

func parseEnvelope(data []byte, keepRaw bool) (*Envelope, error) {
	keys, vals, err := decodeObjectRaw(data)
	if err != nil {
		if errors.Is(err, errNotObject) {
			return nil, &ShapeError{Field: "", Reason: "not an object"}
		}
		return nil, &ShapeError{Field: "", Reason: "not JSON"}
	}
	tree := make(map[string]any, len(vals))
	for k, v := range vals {
		if slices.Contains(knownMembers, k) {
			t, err := ParseJSON(v)
			if err != nil {
				return nil, &ShapeError{Field: k, Reason: "not JSON"}
			}
			tree[k] = t
		}
	}
	get := func(k string) (any, bool) { v, ok := tree[k]; return v, ok }
	if se := checkShape(get); se != nil {
		return nil, se
	}
	e := &Envelope{
		ID:         tree["id"].(string),
		TS:         tree["ts"].(string),
		From:       tree["from"].(string),
		Thread:     tree["thread"].(string),
		Kind:       Kind(tree["kind"].(string)),
		Subject:    tree["subject"].(string),
		Body:       tree["body"].(string),
		NeedsReply: tree["needs_reply"].(bool),
		Meta:       slices.Clip(vals["meta"]),
	}
	e.To, _ = stringList(tree["to"])
	e.Refs, _ = stringList(tree["refs"])
	if r, ok := tree["reply_to"].(string); ok {
		e.ReplyTo = &r
	}
	if tree["authority"] != nil {
		e.Authority = vals["authority"]
	}
	if enc, ok := tree["enc"].(map[string]any); ok {
		e.Enc = &Enc{EPK: enc["epk"].(string), Nonce: enc["nonce"].(string), Body: enc["body"].(string)}
		ekeys, evals, err := decodeObjectRaw(vals["enc"])
		if err != nil {
			return nil, &ShapeError{Field: "enc", Reason: "bad enc"}
		}
		for _, k := range ekeys {
			switch k {
			case "v", "alg", "epk", "nonce", "body":
			default:
				e.Enc.extra = append(e.Enc.extra, rawField{k, evals[k]})
			}
		}
	}
	if s, ok := tree["sig"].(map[string]any); ok {
		alg, ok1 := s["alg"].(string)
		host, ok2 := s["host"].(string)
		key, ok3 := s["key"].(string)
		val, ok4 := s["value"].(string)
		if ok1 && ok2 && ok3 && ok4 {
			e.Sig = &Sig{Alg: alg, Host: host, Key: key, Value: val}
		}
	}
	for _, k := range keys {
		if !slices.Contains(knownMembers, k) {
			e.extra = append(e.extra, rawField{k, vals[k]})
		}
	}
	if keepRaw {
		e.raw = bytes.Clone(data)
	}
	return e, nil
}

// ---- JavaScript JSON --------------------------------------------------------------------------

var errNotObject = errors.New("not a JSON object")

// decodeObjectRaw reads one JSON object as JSON.parse builds it: the keys in order of first
// appearance, and for each key the raw JSON of its last value. Trailing data is an error.
func decodeObjectRaw(data []byte) ([]string, map[string]json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	tok, err := dec.Token()
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrBadJSON, err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		// Still has to be one well-formed JSON value to be "not an object" rather than not JSON.
		if _, err := ParseJSON(data); err != nil {
			return nil, nil, err
		}
		return nil, nil, errNotObject
	}
	var keys []string
	vals := map[string]json.RawMessage{}
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			return nil, nil, fmt.Errorf("%w: %v", ErrBadJSON, err)
		}
		k, ok := kt.(string)
		if !ok {
			return nil, nil, fmt.Errorf("%w: object key", ErrBadJSON)
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, nil, fmt.Errorf("%w: %v", ErrBadJSON, err)
		}
		if _, seen := vals[k]; !seen {
			keys = append(keys, k)
		}
		vals[k] = v
	}
	if _, err := dec.Token(); err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrBadJSON, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, nil, fmt.Errorf("%w: data after the value", ErrBadJSON)
	}
	return keys, vals, nil
}

// appendJSValue appends raw JSON as JSON.stringify(JSON.parse(raw)) prints it: compact, strings
// and numbers as JavaScript prints them, object members in JavaScript's property order.
func appendJSValue(b []byte, raw json.RawMessage) ([]byte, error) {
	t := bytes.TrimLeft(raw, " \t\r\n")
	if len(t) == 0 {
		return nil, fmt.Errorf("%w: empty value", ErrBadJSON)
	}
	switch t[0] {
	case '{':
		keys, vals, err := decodeObjectRaw(raw)
		if err != nil {
			return nil, err
		}
		return appendJSObject(b, keys, vals)
	case '[':
		var elems []json.RawMessage
		if err := json.Unmarshal(raw, &elems); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrBadJSON, err)
		}
		b = append(b, '[')
		for i, el := range elems {
			if i > 0 {
				b = append(b, ',')
			}
			var err error
			if b, err = appendJSValue(b, el); err != nil {
				return nil, err
			}
		}
		return append(b, ']'), nil
	default:
		v, err := ParseJSON(raw)
		if err != nil {
			return nil, err
		}
		return appendCanonical(b, v)
	}
}

// appendJSObject prints an object whose members were inserted in the order of keys: JavaScript
// puts the array-index keys ("0", "1", … up to 2³²−2) first, in numeric order, then the others in
// insertion order.
func appendJSObject(b []byte, keys []string, vals map[string]json.RawMessage) ([]byte, error) {
	var idx, rest []string
	for _, k := range keys {
		if isArrayIndex(k) {
			idx = append(idx, k)
		} else {
			rest = append(rest, k)
		}
	}
	slices.SortFunc(idx, func(a, b string) int {
		if len(a) != len(b) {
			return len(a) - len(b)
		}
		return strings.Compare(a, b)
	})
	b = append(b, '{')
	for i, k := range append(idx, rest...) {
		if i > 0 {
			b = append(b, ',')
		}
		var err error
		if b, err = appendJSString(b, k); err != nil {
			return nil, err
		}
		b = append(b, ':')
		if b, err = appendJSValue(b, vals[k]); err != nil {
			return nil, err
		}
	}
	return append(b, '}'), nil
}

func isArrayIndex(k string) bool {
	if k == "" || len(k) > 10 || (len(k) > 1 && k[0] == '0') {
		return false
	}
	n, err := strconv.ParseUint(k, 10, 64)
	return err == nil && n < 1<<32-1
}

// ---- UTF-16 -----------------------------------------------------------------------------------

// utf16Len is JavaScript's length of s: its UTF-16 code units.
func utf16Len(s string) int {
	n := 0
	for _, r := range s {
		if r >= 0x10000 {
			n += 2
		} else {
			n++
		}
	}
	return n
}

// cutUTF16 is s.slice(0, n) in UTF-16 units, except that a surrogate pair is never split (a Go
// string cannot hold the lone half JavaScript would keep): the pair is left out whole.
func cutUTF16(s string, n int) string {
	units := 0
	for i, r := range s {
		w := 1
		if r >= 0x10000 {
			w = 2
		}
		if units+w > n {
			return s[:i]
		}
		units += w
	}
	return s
}
