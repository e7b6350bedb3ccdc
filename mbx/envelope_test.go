package mbx

import (
	"bytes"
	"crypto/hkdf"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/chacha20poly1305"
	"golang.org/x/crypto/curve25519"
)

// ---- vector cases -----------------------------------------------------------------------------

type envTarget struct {
	RecipientHost            string  `json:"recipient_host"`
	RecipientHostPubkey      string  `json:"recipient_host_pubkey"`
	RecipientEncPrivateKey   string  `json:"recipient_enc_private_key"`
	RecipientEncPublicKey    string  `json:"recipient_enc_public_key"`
	Wire                     string  `json:"wire"`
	WireSHA256               string  `json:"wire_sha256"`
	SealedSigningInput       *string `json:"sealed_signing_input"`
	SealedSigningInputSHA256 string  `json:"sealed_signing_input_sha256"`
	ExpectedPlaintext        string  `json:"expected_plaintext"`
	Checks                   struct {
		CheckShape               *string `json:"checkShape"`
		VerifyEnvelope           bool    `json:"verifyEnvelope"`
		VerifyEnvelopeStoredForm bool    `json:"verifyEnvelope_stored_form"`
		CheckEnc                 *string `json:"checkEnc"`
	} `json:"checks"`
}

type envCase struct {
	Name string `json:"name"`
	// positive cases
	SenderHost              string          `json:"sender_host"`
	SenderSeedB64           string          `json:"sender_seed_b64"`
	SenderPubkey            string          `json:"sender_pubkey"`
	SenderFingerprint       string          `json:"sender_fingerprint"`
	BuildInput              json.RawMessage `json:"build_input"`
	BuildNow                string          `json:"build_now"`
	Envelope                json.RawMessage `json:"envelope"`
	Targets                 []envTarget     `json:"targets"`
	SignedPlain             json.RawMessage `json:"signed_plain"`
	SignedPlainSigningInput *string         `json:"signed_plain_signing_input"`
	SignedPlainSig          *Sig            `json:"signed_plain_sig"`
	// negative cases (and the one tampering that stays valid)
	BasedOn               string `json:"based_on"`
	Expect                string `json:"expect"`
	Expected              string `json:"expected"`
	Wire                  string `json:"wire"`
	VerifyWithPubkey      string `json:"verify_with_pubkey"`
	OpenWithEncPrivateKey string `json:"open_with_enc_private_key"`
	OpenWithEnvelopeID    string `json:"open_with_envelope_id"`
	Checks                struct {
		CheckShape     *string `json:"checkShape"`
		VerifyEnvelope bool    `json:"verifyEnvelope"`
		OpenBody       struct {
			OK        bool   `json:"ok"`
			Error     string `json:"error"`
			Plaintext string `json:"plaintext"`
		} `json:"openBody"`
	} `json:"checks"`
}

// fixedID is an IDSource that returns one id, to rebuild a vector's envelope.
type fixedID string

func (f fixedID) New(time.Time) string { return string(f) }

// jsStringify is JSON.stringify(JSON.parse(raw)), for comparing with the vectors' objects.
func jsStringify(t testing.TB, raw json.RawMessage) []byte {
	t.Helper()
	b, err := appendJSValue(nil, raw)
	if err != nil {
		t.Fatalf("stringify vector object: %v", err)
	}
	return b
}

func TestEnvelopeVectors(t *testing.T) {
	cases := loadCases[envCase](t, "envelope.json")
	byName := map[string]envCase{}
	for _, c := range cases {
		byName[c.Name] = c
	}
	passed, targets := 0, 0
	for _, c := range cases {
		ok := t.Run(c.Name, func(t *testing.T) {
			if c.Wire != "" {
				base, found := byName[c.BasedOn]
				if !found {
					t.Fatalf("based_on %q: no such case", c.BasedOn)
				}
				checkTamperedVector(t, c, base)
				return
			}
			targets += len(c.Targets)
			checkPositiveVector(t, c)
		})
		if ok {
			passed++
		}
	}
	t.Logf("envelope.json: %d of %d cases pass (%d sealed wires)", passed, len(cases), targets)
	if len(cases) < 21 {
		t.Errorf("envelope.json has %d cases, want at least 21", len(cases))
	}
}

func checkPositiveVector(t *testing.T, c envCase) {
	key, err := SigningKeyFromSeed(c.SenderSeedB64)
	if err != nil {
		t.Fatal(err)
	}
	if got := key.PublicKey(); got != c.SenderPubkey {
		t.Fatalf("sender pubkey = %s, want %s", got, c.SenderPubkey)
	}
	if got := key.Fingerprint(); got != c.SenderFingerprint {
		t.Fatalf("sender fingerprint = %s, want %s", got, c.SenderFingerprint)
	}
	want, err := ParseEnvelope(c.Envelope)
	if err != nil {
		t.Fatalf("parse the vector's unsigned envelope: %v", err)
	}

	// Build: the same input at the same time (and the vector's id) gives the same envelope.
	var d Draft
	dec := json.NewDecoder(bytes.NewReader(c.BuildInput))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("build_input does not fit Draft: %v", err)
	}
	now, err := ParseISOTime(c.BuildNow)
	if err != nil {
		t.Fatal(err)
	}
	built, err := Build(d, now, fixedID(want.ID))
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	gotB, err := built.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if wantB := jsStringify(t, c.Envelope); !bytes.Equal(gotB, wantB) {
		t.Errorf("Build:\n got %s\nwant %s", clip(gotB), clip(wantB))
	}
	if got, want := NewULIDs(testRand(12)).New(now)[:10], want.ID[:10]; got != want {
		t.Errorf("ULID time part at build_now = %s, want %s", got, want)
	}

	// Sign the plaintext (LAN) form: same signing input, same signature, same bytes.
	plain := built.clone()
	if err := plain.Sign(c.SenderHost, key); err != nil {
		t.Fatal(err)
	}
	in, err := plain.SigningInput()
	if err != nil {
		t.Fatal(err)
	}
	if c.SignedPlainSigningInput != nil && string(in) != *c.SignedPlainSigningInput {
		t.Errorf("plain signing input:\n got %s\nwant %s", clip(in), clip([]byte(*c.SignedPlainSigningInput)))
	}
	wantSig := c.SignedPlainSig
	if c.SignedPlain != nil {
		sp, err := ParseEnvelope(c.SignedPlain)
		if err != nil {
			t.Fatalf("parse signed_plain: %v", err)
		}
		wantSig = sp.Sig
		if err := sp.Verify(c.SenderHost, c.SenderPubkey); err != nil {
			t.Errorf("the original's signed plain envelope does not verify: %v", err)
		}
		gotM, err := plain.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if wantM := jsStringify(t, c.SignedPlain); !bytes.Equal(gotM, wantM) {
			t.Errorf("signed plain bytes:\n got %s\nwant %s", clip(gotM), clip(wantM))
		}
	}
	if wantSig == nil || *plain.Sig != *wantSig {
		t.Errorf("plain sig = %+v, want %+v", plain.Sig, wantSig)
	}
	if err := plain.Verify(c.SenderHost, c.SenderPubkey); err != nil {
		t.Errorf("Go's plain signature does not verify: %v", err)
	}
	if body, err := plain.Open(); err != nil || body != d.Body {
		t.Errorf("Open of a plaintext envelope = %q, %v", clip([]byte(body)), err)
	}

	for _, tg := range c.Targets {
		t.Run("to "+tg.RecipientHost, func(t *testing.T) { checkSealedVector(t, c, key, built, tg) })
	}
}

func checkSealedVector(t *testing.T, c envCase, key SigningKey, built *Envelope, tg envTarget) {
	wire := []byte(tg.Wire)
	if got := SHA256Hex(wire); got != tg.WireSHA256 {
		t.Fatalf("wire sha256 = %s, want %s", got, tg.WireSHA256)
	}
	if tg.Checks.CheckShape != nil || tg.Checks.CheckEnc != nil || !tg.Checks.VerifyEnvelope || !tg.Checks.VerifyEnvelopeStoredForm {
		t.Fatalf("positive target with negative checks: %+v", tg.Checks)
	}
	e, err := ParseEnvelope(wire)
	if err != nil {
		t.Fatalf("ParseEnvelope: %v", err)
	}
	if !bytes.Equal(e.Raw(), wire) {
		t.Error("Raw is not the bytes parsed")
	}
	in, err := e.SigningInput()
	if err != nil {
		t.Fatal(err)
	}
	if tg.SealedSigningInput != nil && string(in) != *tg.SealedSigningInput {
		t.Errorf("sealed signing input:\n got %s\nwant %s", clip(in), clip([]byte(*tg.SealedSigningInput)))
	}
	if tg.SealedSigningInputSHA256 != "" && SHA256Hex(in) != tg.SealedSigningInputSHA256 {
		t.Errorf("sealed signing input sha256 = %s, want %s", SHA256Hex(in), tg.SealedSigningInputSHA256)
	}
	if err := e.Verify(c.SenderHost, c.SenderPubkey); err != nil {
		t.Errorf("Verify: %v", err)
	}
	// Go re-signs the same sealed envelope: Ed25519 is deterministic.
	again := e.clone()
	if err := again.Sign(c.SenderHost, key); err != nil {
		t.Fatal(err)
	}
	if *again.Sig != *e.Sig {
		t.Errorf("Go's signature of the sealed envelope = %+v, want %+v", again.Sig, e.Sig)
	}
	// The byte layout is JSON.stringify's.
	m, err := e.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(m, wire) {
		t.Errorf("Marshal of the parsed wire:\n got %s\nwant %s", clip(m), clip(wire))
	}
	// The sealed envelope is the built one with enc, body and sig filled in.
	filled := built.clone()
	filled.Enc, filled.Body, filled.Sig = e.Enc, e.Enc.Body, e.Sig
	if fm, _ := filled.Marshal(); !bytes.Equal(fm, wire) {
		t.Errorf("built envelope sealed with the vector's enc:\n got %s\nwant %s", clip(fm), clip(wire))
	}

	encKey, err := EncKeyFromPrivate(tg.RecipientEncPrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	if encKey.PublicKey() != tg.RecipientEncPublicKey {
		t.Fatalf("recipient enc public key = %s, want %s", encKey.PublicKey(), tg.RecipientEncPublicKey)
	}
	pt, err := e.Open(encKey)
	if err != nil || pt != tg.ExpectedPlaintext {
		t.Errorf("Open = %q, %v; want %q", clip([]byte(pt)), err, clip([]byte(tg.ExpectedPlaintext)))
	}
	if ref, err := refOpen(e.Enc, e.ID, tg.RecipientEncPrivateKey); err != nil || ref != tg.ExpectedPlaintext {
		t.Errorf("reference open = %q, %v", clip([]byte(ref)), err)
	}
	// Receive with a retired key listed after an unrelated current one.
	other := mustEncKey(t, 99)
	stored, err := Receive(wire, c.SenderHost, c.SenderPubkey, other, encKey)
	if err != nil {
		t.Fatalf("Receive: %v", err)
	}
	if stored.Body != tg.ExpectedPlaintext || stored.Enc == nil || !bytes.Equal(stored.Raw(), wire) {
		t.Errorf("Receive stored form: body %q, enc %v, raw kept %v", clip([]byte(stored.Body)), stored.Enc != nil, bytes.Equal(stored.Raw(), wire))
	}
	// The stored form ({...sealed, body: plaintext}) still verifies.
	if err := stored.Verify(c.SenderHost, c.SenderPubkey); err != nil {
		t.Errorf("stored form does not verify: %v", err)
	}
	if _, err := Receive(wire, c.SenderHost, c.SenderPubkey, other); !errors.Is(err, ErrUndecryptable) {
		t.Errorf("Receive with only an unrelated key: %v, want ErrUndecryptable", err)
	}
}

// Stages of reception, in the original's order.
const (
	stageShape     = "shape"
	stageSignature = "signature"
	stageOpen      = "undecryptable"
	stageAccepted  = "accepted"
)

func checkTamperedVector(t *testing.T, c envCase, base envCase) {
	wire := []byte(c.Wire)
	host := base.SenderHost
	wantStage := stageAccepted
	switch {
	case c.Checks.CheckShape != nil:
		wantStage = stageShape
	case !c.Checks.VerifyEnvelope:
		wantStage = stageSignature
	case !c.Checks.OpenBody.OK:
		wantStage = stageOpen
	}
	if (wantStage == stageAccepted) != (c.Expect != "invalid") {
		t.Fatalf("case says expect %q but its checks say %s", c.Expect, wantStage)
	}

	gotStage := stageAccepted
	e, err := ParseEnvelope(wire)
	var se *ShapeError
	switch {
	case c.Checks.CheckShape != nil:
		if !errors.As(err, &se) || !errors.Is(err, ErrBadEnvelope) {
			t.Fatalf("ParseEnvelope = %v, want a shape error %q", err, *c.Checks.CheckShape)
		}
		if se.Reason != *c.Checks.CheckShape {
			t.Errorf("shape reason = %q, want the original's %q", se.Reason, *c.Checks.CheckShape)
		}
	case err != nil:
		t.Fatalf("ParseEnvelope: %v (the original's checkShape accepts it)", err)
	}
	if err != nil {
		gotStage = stageShape
		// The original verifies and opens the raw object anyway; its verdicts are recorded, so
		// check that Go agrees on the pieces it can reach: the enc alone does not open.
		// (An enc that fails checkEnc, such as v:2, has no Enc value at all: Go's type holds v1.)
		tree, perr := ParseJSON(wire)
		if perr != nil {
			t.Fatal(perr)
		}
		if encV, ok := tree.(map[string]any)["enc"].(map[string]any); ok {
			k, _ := EncKeyFromPrivate(c.OpenWithEncPrivateKey)
			var oerr error
			if se := checkEnc(encV); se != nil {
				oerr = se
			} else {
				_, oerr = OpenEnc(&Enc{EPK: encV["epk"].(string), Nonce: encV["nonce"].(string), Body: encV["body"].(string)}, c.OpenWithEnvelopeID, k)
			}
			if (oerr == nil) != c.Checks.OpenBody.OK {
				t.Errorf("opening the enc of the malformed envelope: %v, original ok=%v", oerr, c.Checks.OpenBody.OK)
			}
		}
	} else {
		verr := e.Verify(host, c.VerifyWithPubkey)
		if (verr == nil) != c.Checks.VerifyEnvelope {
			t.Errorf("Verify = %v, original verdict %v", verr, c.Checks.VerifyEnvelope)
		}
		if verr != nil && !errors.Is(verr, ErrBadSignature) {
			t.Errorf("Verify error %v does not match ErrBadSignature", verr)
		}
		k, err := EncKeyFromPrivate(c.OpenWithEncPrivateKey)
		if err != nil {
			t.Fatal(err)
		}
		pt, oerr := OpenEnc(e.Enc, c.OpenWithEnvelopeID, k)
		if (oerr == nil) != c.Checks.OpenBody.OK {
			t.Errorf("OpenEnc = %v, original ok=%v (%s)", oerr, c.Checks.OpenBody.OK, c.Checks.OpenBody.Error)
		}
		if oerr == nil && pt != c.Checks.OpenBody.Plaintext {
			t.Errorf("OpenEnc = %q, want %q", pt, c.Checks.OpenBody.Plaintext)
		}
		if oerr != nil && !errors.Is(oerr, ErrUndecryptable) {
			t.Errorf("OpenEnc error %v does not match ErrUndecryptable", oerr)
		}
		switch {
		case verr != nil:
			gotStage = stageSignature
		case oerr != nil:
			gotStage = stageOpen
		}
	}
	if gotStage != wantStage {
		t.Errorf("refused at stage %s, the original at %s", gotStage, wantStage)
	}
	// A receiving host (opening under the id in the wire) maps the stage to one sentinel.
	if c.OpenWithEnvelopeID == mustID(t, wire) {
		k, _ := EncKeyFromPrivate(c.OpenWithEncPrivateKey)
		_, rerr := Receive(wire, host, c.VerifyWithPubkey, k)
		want := map[string]error{stageShape: ErrBadEnvelope, stageSignature: ErrBadSignature, stageOpen: ErrUndecryptable}[wantStage]
		if (want == nil && rerr != nil) || (want != nil && !errors.Is(rerr, want)) {
			t.Errorf("Receive = %v, want %v", rerr, want)
		}
	}
}

func mustID(t *testing.T, wire []byte) string {
	var x struct{ ID string }
	if err := json.Unmarshal(wire, &x); err != nil {
		t.Fatal(err)
	}
	return x.ID
}

// refOpen opens a sealed body following the vectors' notes with other primitives than OpenEnc
// (x/crypto curve25519, the standard library's HKDF), so the two check each other.
func refOpen(enc *Enc, id, privB64 string) (string, error) {
	dec := base64.StdEncoding.DecodeString
	priv, err := dec(privB64)
	if err != nil {
		return "", err
	}
	epk, err := dec(enc.EPK)
	if err != nil {
		return "", err
	}
	nonce, err := dec(enc.Nonce)
	if err != nil {
		return "", err
	}
	ct, err := dec(enc.Body)
	if err != nil {
		return "", err
	}
	shared, err := curve25519.X25519(priv, epk)
	if err != nil {
		return "", err
	}
	key, err := hkdf.Key(sha256.New, shared, epk, "agentmbx-enc-1:"+id, 32)
	if err != nil {
		return "", err
	}
	aead, err := chacha20poly1305.NewX(key)
	if err != nil {
		return "", err
	}
	pt, err := aead.Open(nil, nonce, ct, nil)
	return string(pt), err
}

func clip(b []byte) string {
	if len(b) > 400 {
		return fmt.Sprintf("%s…(%d bytes)", b[:400], len(b))
	}
	return string(b)
}

// ---- fixtures ---------------------------------------------------------------------------------

// testRand is a deterministic randomness source.
func testRand(seed uint64) io.Reader {
	return rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8), 7})
}

func mustEncKey(t testing.TB, seed uint64) EncKey {
	t.Helper()
	k, err := GenerateEncKey(testRand(seed))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func mustSigningKey(t testing.TB, seed uint64) SigningKey {
	t.Helper()
	k, err := GenerateSigningKey(testRand(seed))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

var testNow = time.Date(2026, 10, 2, 10, 0, 0, 0, time.UTC)

func mustBuild(t testing.TB, d Draft) *Envelope {
	t.Helper()
	e, err := Build(d, testNow, NewULIDs(testRand(1)))
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func simpleDraft() Draft {
	return Draft{From: "alice@alpha", To: []string{"bob@beta"}, Subject: "hello", Body: "Hi bob, <b>&</b> \u2028 ünï 🚀"}
}

// ---- seal and open ----------------------------------------------------------------------------

func TestSealOpenRoundTrip(t *testing.T) {
	host := mustSigningKey(t, 1)
	oldEnc, newEnc, stranger := mustEncKey(t, 2), mustEncKey(t, 3), mustEncKey(t, 4)
	e := mustBuild(t, simpleDraft())
	before, _ := e.Marshal()

	sealed, wire, err := e.Seal(testRand(5), oldEnc.PublicKey(), "alpha", host)
	if err != nil {
		t.Fatal(err)
	}
	if after, _ := e.Marshal(); !bytes.Equal(before, after) || e.Enc != nil {
		t.Fatal("Seal changed the plaintext envelope")
	}
	if !bytes.Equal(sealed.Raw(), wire) {
		t.Error("sealed Raw is not the wire")
	}
	if sealed.Body != sealed.Enc.Body || strings.Contains(string(wire), "bob, <b>") {
		t.Error("the wire carries plaintext")
	}
	if _, _, err := sealed.Seal(testRand(6), oldEnc.PublicKey(), "alpha", host); !errors.Is(err, ErrAlreadySealed) {
		t.Errorf("sealing a sealed envelope: %v, want ErrAlreadySealed", err)
	}

	tests := []struct {
		name string
		keys []EncKey
		ok   bool
	}{
		{"current key", []EncKey{oldEnc}, true},
		{"after rotation the old key is retired", []EncKey{newEnc, oldEnc}, true},
		{"zero keys are skipped", []EncKey{{}, stranger, oldEnc}, true},
		{"only the new key", []EncKey{newEnc}, false},
		{"no key", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Receive(wire, "alpha", host.PublicKey(), tt.keys...)
			if !tt.ok {
				if !errors.Is(err, ErrUndecryptable) {
					t.Fatalf("Receive = %v, want ErrUndecryptable", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Body != e.Body {
				t.Errorf("body = %q, want %q", got.Body, e.Body)
			}
		})
	}
	if ref, err := refOpen(sealed.Enc, sealed.ID, oldEnc.Private()); err != nil || ref != e.Body {
		t.Errorf("reference open of Go's sealing = %q, %v", ref, err)
	}
	if _, err := OpenEnc(sealed.Enc, "01ZZZZZZZZZZZZZZZZZZZZZZZZ", oldEnc); !errors.Is(err, ErrUndecryptable) {
		t.Errorf("open under another id: %v, want ErrUndecryptable", err)
	}

	// Another seal of the same envelope makes other ciphertext (what the relay calls a conflict):
	// persist the first wire, never reseal.
	_, wire2, err := e.Seal(testRand(7), oldEnc.PublicKey(), "alpha", host)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(wire, wire2) {
		t.Error("two seals with different randomness gave the same wire")
	}
	if _, _, err := e.Seal(testRand(8), B64(make([]byte, 32)), "alpha", host); !errors.Is(err, ErrBadKey) {
		t.Errorf("seal to the all-zero key: %v, want ErrBadKey", err)
	}
	if _, _, err := e.Seal(testRand(8), "not a key", "alpha", host); !errors.Is(err, ErrBadKey) {
		t.Errorf("seal to garbage: %v, want ErrBadKey", err)
	}
	if _, _, err := e.Seal(strings.NewReader("short"), oldEnc.PublicKey(), "alpha", host); err == nil {
		t.Error("seal with exhausted randomness succeeded")
	}
}

func TestSealDeterministicWithInjectedRandomness(t *testing.T) {
	host := mustSigningKey(t, 1)
	enc := mustEncKey(t, 2)
	e := mustBuild(t, simpleDraft())
	_, a, err := e.Seal(testRand(9), enc.PublicKey(), "alpha", host)
	if err != nil {
		t.Fatal(err)
	}
	_, b, err := e.Seal(testRand(9), enc.PublicKey(), "alpha", host)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Error("the same randomness gave different wires")
	}
}

func TestDecodeUTF8LikeTextDecoder(t *testing.T) {
	tests := []struct {
		in   []byte
		want string
	}{
		{[]byte("plain"), "plain"},
		{[]byte("\xEF\xBB\xBFbom"), "bom"},
		{[]byte("\xEF\xBB\xBF\xEF\xBB\xBFtwo"), "\uFEFFtwo"},
		{[]byte("a\xFFb"), "a\uFFFDb"},
		{[]byte("\xE2\x82"), "\uFFFD"},                 // truncated: one maximal subpart
		{[]byte("\xE2\x82x"), "\uFFFDx"},               // same, then a good byte
		{[]byte("\xED\xA0\x80"), "\uFFFD\uFFFD\uFFFD"}, // a surrogate: three
		{[]byte("\xF0\x9F\x9A"), "\uFFFD"},
		{[]byte("\xC0\xAF"), "\uFFFD\uFFFD"},
	}
	for _, tt := range tests {
		if got := decodeUTF8(tt.in); got != tt.want {
			t.Errorf("decodeUTF8(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// ---- build ------------------------------------------------------------------------------------

func TestBuild(t *testing.T) {
	long := strings.Repeat("x", 199) + "🚀tail"
	tests := []struct {
		name        string
		d           Draft
		wantSubject string
		wantMeta    string
		wantErr     error
	}{
		{"defaults", Draft{From: "a@h", To: []string{"b@h"}, Subject: "s", Body: ""}, "s",
			`{"mentions":[],"directives":[],"tags":[],"task_refs":[]}`, nil},
		{"one line", Draft{From: "a@h", To: []string{"b@h"}, Subject: "a\nb\tc\x7fd\u0085e\u2028f\u2029g\x00h", Body: ""}, "a b c d e f g h", "", nil},
		{"cut to 200 units without splitting a pair", Draft{From: "a@h", To: []string{"b@h"}, Subject: long}, strings.Repeat("x", 199), "", nil},
		{"all meta options", Draft{From: "a@h", To: []string{"b@h"}, Subject: "s", Body: "@Bob @bob #X1 /decision T77",
			Origin: "external", Hop: 3, Project: "/p", ProjectKey: "k", UnverifiedSender: true}, "s",
			`{"mentions":["bob","bob"],"directives":["decision"],"tags":["x1"],"task_refs":["T77"],"sender_verification":"unverified","origin":"external","external_since":"2026-10-02T10:00:00.000Z","external_source":"declared","hop":3,"project":"/p","project_key":"k"}`, nil},
		{"origin agent adds nothing", Draft{From: "a@h", To: []string{"b@h"}, Subject: "s", Origin: "agent"}, "s",
			`{"mentions":[],"directives":[],"tags":[],"task_refs":[]}`, nil},
		{"project cut to 300", Draft{From: "a@h", To: []string{"b@h"}, Subject: "s", Project: strings.Repeat("p", 400)}, "s",
			`{"mentions":[],"directives":[],"tags":[],"task_refs":[],"project":"` + strings.Repeat("p", 300) + `"}`, nil},
		{"blank subject", Draft{From: "a@h", To: []string{"b@h"}, Subject: " \u3000\ufeff\n"}, "", "", ErrBadDraft},
		{"U+0085 is not blank to trim", Draft{From: "a@h", To: []string{"b@h"}, Subject: "\u0085"}, " ", "", nil},
		{"no recipient", Draft{From: "a@h", Subject: "s"}, "", "", ErrBadDraft},
		{"body over 256 KiB", Draft{From: "a@h", To: []string{"b@h"}, Subject: "s", Body: strings.Repeat("b", MaxBody+1)}, "", "", ErrBadDraft},
		{"body of exactly 256 KiB", Draft{From: "a@h", To: []string{"b@h"}, Subject: "s", Body: strings.Repeat("b", MaxBody)}, "s", "", nil},
		{"bad kind", Draft{From: "a@h", To: []string{"b@h"}, Subject: "s", Kind: "note"}, "", "", ErrBadEnvelope},
		{"from without host", Draft{From: "alice", To: []string{"b@h"}, Subject: "s"}, "", "", ErrBadEnvelope},
		{"hop over 1000", Draft{From: "a@h", To: []string{"b@h"}, Subject: "s", Hop: 1001}, "", "", ErrBadEnvelope},
		{"invalid UTF-8", Draft{From: "a@h", To: []string{"b@h"}, Subject: "s", Body: "\xff"}, "", "", ErrBadDraft},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := Build(tt.d, testNow, NewULIDs(testRand(1)))
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("Build err = %v, want %v", err, tt.wantErr)
				}
				if !errors.Is(err, ErrBadDraft) {
					t.Errorf("Build err = %v, want it to match ErrBadDraft too", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if e.Subject != tt.wantSubject {
				t.Errorf("subject = %q, want %q", e.Subject, tt.wantSubject)
			}
			if tt.wantMeta != "" && string(e.Meta) != tt.wantMeta {
				t.Errorf("meta:\n got %s\nwant %s", e.Meta, tt.wantMeta)
			}
			if e.Thread != e.ID || e.ReplyTo != nil || e.Kind != KindMessage || e.TS != "2026-10-02T10:00:00.000Z" {
				t.Errorf("defaults: thread %q id %q reply_to %v kind %q ts %q", e.Thread, e.ID, e.ReplyTo, e.Kind, e.TS)
			}
		})
	}
}

func TestParseBodyMeta(t *testing.T) {
	tests := []struct {
		body string
		want BodyMeta
	}{
		{"@bob and @carol@beta: see T123 #release /claim", BodyMeta{[]string{"bob", "carol@beta"}, []string{"claim"}, []string{"release"}, []string{"T123"}}},
		{"@Bob @bob @BOB", BodyMeta{Mentions: []string{"bob", "bob", "bob"}}},
		{"mail a@b.com or (@dave) or \u00a0@erin", BodyMeta{Mentions: []string{"dave", "erin"}}},
		{"@x too short, @" + strings.Repeat("n", 45), BodyMeta{Mentions: []string{strings.Repeat("n", 40)}}},
		{"@bob@my.host.lan", BodyMeta{Mentions: []string{"bob@my"}}},
		{"@\u017fam and #\u212aelvin use no folding", BodyMeta{}},
		{"/done. /doneX a/done /checkin\n/approve", BodyMeta{Directives: []string{"done", "checkin", "approve"}}},
		{"/DONE is case-sensitive", BodyMeta{}},
		{"#1abc #a #ab #Ab_c-d #" + strings.Repeat("t", 50), BodyMeta{Tags: []string{"ab", "ab_c-d", strings.Repeat("t", 41)}}},
		{"T1 T12 T123456 T1234567 xT12 T12x T12_ (T99)", BodyMeta{TaskRefs: []string{"T12", "T123456", "T99"}}},
		{"T12 T12 #ab #AB", BodyMeta{Tags: []string{"ab", "ab"}, TaskRefs: []string{"T12"}}},
	}
	norm := func(x []string) []string {
		if len(x) == 0 {
			return nil
		}
		return x
	}
	for _, tt := range tests {
		got := ParseBodyMeta(tt.body)
		for _, p := range []struct {
			name      string
			got, want []string
		}{
			{"mentions", got.Mentions, tt.want.Mentions},
			{"directives", got.Directives, tt.want.Directives},
			{"tags", got.Tags, tt.want.Tags},
			{"task_refs", got.TaskRefs, tt.want.TaskRefs},
		} {
			if fmt.Sprint(norm(p.got)) != fmt.Sprint(norm(p.want)) {
				t.Errorf("ParseBodyMeta(%q).%s = %q, want %q", tt.body, p.name, p.got, p.want)
			}
		}
	}
}

// ---- shape ------------------------------------------------------------------------------------

// validTree is a sealed, signed envelope as a generic tree, to break one field at a time.
func validTree(t *testing.T) map[string]any {
	t.Helper()
	e := mustBuild(t, simpleDraft())
	_, wire, err := e.Seal(testRand(5), mustEncKey(t, 2).PublicKey(), "alpha", mustSigningKey(t, 1))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(wire, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestCheckShape(t *testing.T) {
	rep := func(s string, n int) string { return strings.Repeat(s, n) }
	list := func(n int, s string) []any {
		out := make([]any, n)
		for i := range out {
			out[i] = s
		}
		return out
	}
	grant := func() map[string]any {
		g := map[string]any{"v": 2, "caps": []any{"decision"}}
		for _, f := range []string{"id", "iss", "sub", "agent", "host", "iat", "exp", "nonce", "sig"} {
			g[f] = "x"
		}
		return g
	}
	tests := []struct {
		name       string
		mutate     func(m map[string]any)
		field, why string // "" = valid
	}{
		{"valid", func(m map[string]any) {}, "", ""},
		{"v 3.0 is 3", func(m map[string]any) { m["v"] = json.Number("3.0") }, "", ""},
		{"v 2", func(m map[string]any) { m["v"] = 2 }, "v", "unsupported version"},
		{"v string", func(m map[string]any) { m["v"] = "3" }, "v", "unsupported version"},
		{"id lowercase", func(m map[string]any) { m["id"] = strings.ToLower(m["id"].(string)) }, "id", "bad id"},
		{"from without @", func(m map[string]any) { m["from"] = "alice" }, "from", "bad from"},
		{"from 301", func(m map[string]any) { m["from"] = "a@" + rep("h", 299) }, "from", "from over 300 characters"},
		{"from 300 in UTF-16 units", func(m map[string]any) { m["from"] = "a@" + rep("😀", 149) }, "", ""},
		{"from 302 in UTF-16 units", func(m map[string]any) { m["from"] = "a@" + rep("😀", 150) }, "from", "from over 300 characters"},
		{"to empty", func(m map[string]any) { m["to"] = []any{} }, "to", "bad to"},
		{"to number", func(m map[string]any) { m["to"] = []any{"a@b", 1} }, "to", "bad to"},
		{"to string", func(m map[string]any) { m["to"] = "a@b" }, "to", "bad to"},
		{"100 recipients", func(m map[string]any) { m["to"] = list(100, "a@b") }, "", ""},
		{"101 recipients", func(m map[string]any) { m["to"] = list(101, "a@b") }, "to", "more than 100 recipients"},
		{"recipient 301", func(m map[string]any) { m["to"] = []any{rep("r", 301)} }, "to", "recipient over 300 characters"},
		{"kind", func(m map[string]any) { m["kind"] = "note" }, "kind", "bad kind"},
		{"every kind", func(m map[string]any) { m["kind"] = "task" }, "", ""},
		{"enc missing", func(m map[string]any) { delete(m, "enc") }, "enc", "bad enc"},
		{"body number", func(m map[string]any) { m["body"] = 1 }, "body", "bad body"},
		{"plain body over 256 KiB", func(m map[string]any) { m["enc"] = nil; m["body"] = rep("b", MaxBody+1) }, "body", "body over 262144 bytes"},
		{"plain body of 256 KiB", func(m map[string]any) { m["enc"] = nil; m["body"] = rep("b", MaxBody) }, "", ""},
		{"sealed body field over the sealed cap", func(m map[string]any) { m["body"] = rep("b", MaxSealedBody+1) }, "body", "body over 349548 bytes"},
		{"subject number", func(m map[string]any) { m["subject"] = 5 }, "subject", "bad subject"},
		{"subject 201", func(m map[string]any) { m["subject"] = rep("s", 201) }, "subject", "subject over 200 characters"},
		{"subject U+2028", func(m map[string]any) { m["subject"] = "a\u2028b" }, "subject", "subject contains control characters"},
		{"subject NEL", func(m map[string]any) { m["subject"] = "a\u0085b" }, "subject", "subject contains control characters"},
		{"subject DEL", func(m map[string]any) { m["subject"] = "a\x7fb" }, "subject", "subject contains control characters"},
		{"subject C1 other than NEL is allowed", func(m map[string]any) { m["subject"] = "a\u0086b" }, "", ""},
		{"ts", func(m map[string]any) { m["ts"] = "yesterday" }, "ts", "bad ts"},
		{"ts with offset", func(m map[string]any) { m["ts"] = "2026-10-02T12:00:00+02:00" }, "", ""},
		{"thread 301", func(m map[string]any) { m["thread"] = rep("t", 301) }, "thread", "bad thread"},
		{"thread missing", func(m map[string]any) { delete(m, "thread") }, "thread", "bad thread"},
		{"reply_to number", func(m map[string]any) { m["reply_to"] = 5 }, "reply_to", "bad reply_to"},
		{"reply_to missing", func(m map[string]any) { delete(m, "reply_to") }, "reply_to", "bad reply_to"},
		{"reply_to string", func(m map[string]any) { m["reply_to"] = "01JPZZZZZZZZZZZZZZZZZZZZZY" }, "", ""},
		{"needs_reply string", func(m map[string]any) { m["needs_reply"] = "true" }, "needs_reply", "bad needs_reply"},
		{"refs number", func(m map[string]any) { m["refs"] = []any{5} }, "refs", "bad refs"},
		{"101 refs", func(m map[string]any) { m["refs"] = list(101, "r") }, "refs", "more than 100 refs or a ref over 2048 characters"},
		{"ref 2049", func(m map[string]any) { m["refs"] = []any{rep("r", 2049)} }, "refs", "more than 100 refs or a ref over 2048 characters"},
		{"enc string", func(m map[string]any) { m["enc"] = "x" }, "enc", "bad enc"},
		{"enc array", func(m map[string]any) { m["enc"] = []any{} }, "enc.v", "unsupported enc version"},
		{"enc alg", func(m map[string]any) { m["enc"].(map[string]any)["alg"] = "aes" }, "enc.alg", "unsupported enc algorithm"},
		{"enc epk short", func(m map[string]any) { m["enc"].(map[string]any)["epk"] = B64(make([]byte, 31)) }, "enc.epk", "bad enc epk"},
		{"enc nonce unpadded is fine", func(m map[string]any) {
			e := m["enc"].(map[string]any)
			e["nonce"] = strings.TrimRight(e["nonce"].(string), "=")
		}, "", ""},
		{"enc body empty", func(m map[string]any) { m["enc"].(map[string]any)["body"] = "" }, "enc.body", "bad enc body"},
		{"authority missing", func(m map[string]any) { delete(m, "authority") }, "authority", "bad authority"},
		{"authority array", func(m map[string]any) { m["authority"] = []any{} }, "authority", "bad authority"},
		{"owner authority", func(m map[string]any) { m["authority"] = map[string]any{"owner_sig": "s", "owner_fp": "f"} }, "", ""},
		{"owner authority with a grant", func(m map[string]any) {
			m["authority"] = map[string]any{"owner_sig": "s", "owner_fp": "f", "grant": grant()}
		}, "authority", "bad owner authority"},
		{"owner_sig null", func(m map[string]any) { m["authority"] = map[string]any{"owner_sig": nil, "owner_fp": "f"} }, "authority", "bad owner authority"},
		{"grant authority", func(m map[string]any) { m["authority"] = map[string]any{"grant": grant(), "session_sig": "s"} }, "", ""},
		{"grant v1", func(m map[string]any) {
			g := grant()
			g["v"] = 1
			m["authority"] = map[string]any{"grant": g, "session_sig": "s"}
		}, "authority.grant", "bad grant authority"},
		{"grant.nonce number", func(m map[string]any) {
			g := grant()
			g["nonce"] = 1
			m["authority"] = map[string]any{"grant": g, "session_sig": "s"}
		}, "authority.grant.nonce", "bad grant.nonce"},
		{"grant.caps", func(m map[string]any) {
			g := grant()
			g["caps"] = "all"
			m["authority"] = map[string]any{"grant": g, "session_sig": "s"}
		}, "authority.grant.caps", "bad grant.caps"},
		{"meta missing", func(m map[string]any) { delete(m, "meta") }, "meta", "bad meta"},
		{"meta array", func(m map[string]any) { m["meta"] = []any{} }, "meta", "bad meta"},
		{"meta.tags missing", func(m map[string]any) { delete(m["meta"].(map[string]any), "tags") }, "meta.tags", "bad meta.tags"},
		{"meta.mentions number", func(m map[string]any) { m["meta"].(map[string]any)["mentions"] = []any{1} }, "meta.mentions", "bad meta.mentions"},
		{"meta unknown key", func(m map[string]any) { m["meta"].(map[string]any)["x-custom"] = map[string]any{"deep": []any{1.5}} }, "", ""},
		{"meta.hop 1000", func(m map[string]any) { m["meta"].(map[string]any)["hop"] = 1000 }, "", ""},
		{"meta.hop 2.0", func(m map[string]any) { m["meta"].(map[string]any)["hop"] = json.Number("2.0") }, "", ""},
		{"meta.hop 1001", func(m map[string]any) { m["meta"].(map[string]any)["hop"] = 1001 }, "meta.hop", "bad hop"},
		{"meta.hop -1", func(m map[string]any) { m["meta"].(map[string]any)["hop"] = -1 }, "meta.hop", "bad hop"},
		{"meta.hop 1.5", func(m map[string]any) { m["meta"].(map[string]any)["hop"] = 1.5 }, "meta.hop", "bad hop"},
		{"meta.hop string", func(m map[string]any) { m["meta"].(map[string]any)["hop"] = "2" }, "meta.hop", "bad hop"},
		{"meta.hop null", func(m map[string]any) { m["meta"].(map[string]any)["hop"] = nil }, "meta.hop", "bad hop"},
		{"meta.sender_verification", func(m map[string]any) { m["meta"].(map[string]any)["sender_verification"] = "yes" }, "meta.sender_verification", "bad sender verification"},
		{"meta.sender_verification leased", func(m map[string]any) { m["meta"].(map[string]any)["sender_verification"] = "leased" }, "", ""},
		{"meta.origin", func(m map[string]any) { m["meta"].(map[string]any)["origin"] = "web" }, "meta.origin", "bad origin"},
		{"meta.project 301", func(m map[string]any) { m["meta"].(map[string]any)["project"] = rep("p", 301) }, "meta.project", "bad project"},
		{"meta.project_key", func(m map[string]any) { m["meta"].(map[string]any)["project_key"] = 5 }, "meta.project_key", "bad project key"},
		{"meta.local_names", func(m map[string]any) { m["meta"].(map[string]any)["local_names"] = []any{"Bob"} }, "meta.local_names", "bad local names"},
		{"meta.local_names ok", func(m map[string]any) { m["meta"].(map[string]any)["local_names"] = []any{"bob", "carol-2"} }, "", ""},
		{"first failure wins", func(m map[string]any) { m["kind"] = "x"; m["subject"] = 1 }, "kind", "bad kind"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := validTree(t)
			tt.mutate(m)
			b, err := json.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			e, err := ParseEnvelope(b)
			if tt.why == "" {
				if err != nil {
					t.Fatalf("ParseEnvelope = %v, want valid", err)
				}
				if err := e.Check(); err != nil {
					t.Errorf("Check of the parsed envelope = %v", err)
				}
				return
			}
			var se *ShapeError
			if !errors.As(err, &se) || !errors.Is(err, ErrBadEnvelope) {
				t.Fatalf("ParseEnvelope = %v, want a ShapeError", err)
			}
			if se.Field != tt.field || se.Reason != tt.why {
				t.Errorf("got %s: %q, want %s: %q", se.Field, se.Reason, tt.field, tt.why)
			}
		})
	}
}

func TestParseEnvelopeNotAnEnvelope(t *testing.T) {
	for _, in := range []string{"", "{", "[]", "null", `"x"`, `{"v":3} x`, `{"v":3}{}`, "\ufeff{}"} {
		_, err := ParseEnvelope([]byte(in))
		var se *ShapeError
		if !errors.As(err, &se) {
			t.Errorf("ParseEnvelope(%q) = %v, want a ShapeError", in, err)
		}
	}
}

// ---- verify -----------------------------------------------------------------------------------

func TestVerify(t *testing.T) {
	key, other := mustSigningKey(t, 1), mustSigningKey(t, 2)
	e := mustBuild(t, simpleDraft())
	if err := e.Sign("alpha", key); err != nil {
		t.Fatal(err)
	}
	wire, err := e.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	edit := func(f func(m map[string]any)) []byte {
		var m map[string]any
		dec := json.NewDecoder(bytes.NewReader(wire))
		dec.UseNumber()
		if err := dec.Decode(&m); err != nil {
			t.Fatal(err)
		}
		f(m)
		b, _ := json.Marshal(m)
		return b
	}
	tests := []struct {
		name string
		wire []byte
		host string
		pub  string
		want error
	}{
		{"good", wire, "alpha", key.PublicKey(), nil},
		{"key order and escaping do not matter", edit(func(map[string]any) {}), "alpha", key.PublicKey(), nil},
		{"received from another host", wire, "gamma", key.PublicKey(), ErrSenderMismatch},
		{"from names another host", edit(func(m map[string]any) { m["from"] = "alice@gamma" }), "alpha", key.PublicKey(), ErrSenderMismatch},
		{"from alpha-2 is not alpha", edit(func(m map[string]any) { m["from"] = "alice@alpha-2" }), "alpha", key.PublicKey(), ErrSenderMismatch},
		{"another pinned key", wire, "alpha", other.PublicKey(), ErrBadSignature},
		{"no sig", edit(func(m map[string]any) { delete(m, "sig") }), "alpha", key.PublicKey(), ErrBadSignature},
		{"sig not an object", edit(func(m map[string]any) { m["sig"] = "x" }), "alpha", key.PublicKey(), ErrBadSignature},
		{"sig.alg", edit(func(m map[string]any) { m["sig"].(map[string]any)["alg"] = "ED25519" }), "alpha", key.PublicKey(), ErrBadSignature},
		{"a member added after signing", edit(func(m map[string]any) { m["priority"] = "high" }), "alpha", key.PublicKey(), ErrBadSignature},
		{"a meta key added after signing", edit(func(m map[string]any) { m["meta"].(map[string]any)["hop"] = 1 }), "alpha", key.PublicKey(), ErrBadSignature},
		{"needs_reply flipped", edit(func(m map[string]any) { m["needs_reply"] = true }), "alpha", key.PublicKey(), ErrBadSignature},
		{"reply_to null to empty", edit(func(m map[string]any) { m["reply_to"] = "" }), "alpha", key.PublicKey(), ErrBadSignature},
		{"authority added", edit(func(m map[string]any) { m["authority"] = map[string]any{"owner_sig": "s", "owner_fp": "f"} }), "alpha", key.PublicKey(), ErrBadSignature},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Receive(tt.wire, tt.host, tt.pub)
			if tt.want == nil && err != nil || tt.want != nil && !errors.Is(err, tt.want) {
				t.Errorf("Receive = %v, want %v", err, tt.want)
			}
		})
	}
}

// An envelope with members this package does not know keeps them: they are signed, marshalled
// and verified with the rest.
func TestUnknownMembersSurvive(t *testing.T) {
	key := mustSigningKey(t, 1)
	e := mustBuild(t, simpleDraft())
	b, _ := e.Marshal()
	withExtra := append(b[:len(b)-1:len(b)-1], `,"x-future":{"b":1,"a":[1.50,"<>"]}}`...)
	p, err := ParseEnvelope(withExtra)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Sign("alpha", key); err != nil {
		t.Fatal(err)
	}
	in, _ := p.SigningInput()
	if !strings.Contains(string(in), `"x-future":{"a":[1.5,"<>"],"b":1}`) {
		t.Errorf("signing input lacks the unknown member: %s", in)
	}
	out, err := p.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), `"enc":null,"x-future":{"b":1,"a":[1.5,"<>"]},"sig":`) {
		t.Errorf("marshal lost or moved the unknown member: %s", out)
	}
	if _, err := Receive(out, "alpha", key.PublicKey()); err != nil {
		t.Errorf("Receive: %v", err)
	}
	stripped := strings.Replace(string(out), `"x-future":{"b":1,"a":[1.5,"<>"]},`, "", 1)
	if _, err := Receive([]byte(stripped), "alpha", key.PublicKey()); !errors.Is(err, ErrBadSignature) {
		t.Errorf("Receive without the signed member: %v, want ErrBadSignature", err)
	}
}

// ---- JavaScript JSON --------------------------------------------------------------------------

func TestAppendJSValue(t *testing.T) {
	tests := []struct{ in, want string }{
		{`{"b":1,"2":2,"a":3,"1":4,"01":5,"4294967295":6,"4294967294":7}`, `{"1":4,"2":2,"4294967294":7,"b":1,"a":3,"01":5,"4294967295":6}`},
		{`{"a":1,"b":2,"a":3}`, `{"a":3,"b":2}`},
		{` [ 1.0 , 1e21, 1E-7, -0, 100 ] `, `[1,1e+21,1e-7,0,100]`},
		{`"<>&\u2028\u0001\/"`, "\"<>&\u2028\\u0001/\""},
		{`{"x":{"z":null,"y":[true,false]}}`, `{"x":{"z":null,"y":[true,false]}}`},
	}
	for _, tt := range tests {
		got, err := appendJSValue(nil, json.RawMessage(tt.in))
		if err != nil || string(got) != tt.want {
			t.Errorf("appendJSValue(%s) = %s, %v; want %s", tt.in, got, err, tt.want)
		}
	}
}

func TestMetadataAndSetMeta(t *testing.T) {
	e := mustBuild(t, Draft{From: "a@h", To: []string{"b@h"}, Subject: "s", Body: "@bob T12", Hop: 4, Origin: "external"})
	md, err := e.Metadata()
	if err != nil {
		t.Fatal(err)
	}
	if md.Hop != 4 || md.Origin != "external" || md.ExternalSource != "declared" || fmt.Sprint(md.Mentions) != "[bob]" || fmt.Sprint(md.TaskRefs) != "[T12]" {
		t.Errorf("Metadata = %+v", md)
	}
	if err := e.SetMeta("hop", 5); err != nil {
		t.Fatal(err)
	}
	if err := e.SetMeta("local_names", []string{"bob"}); err != nil {
		t.Fatal(err)
	}
	want := `{"mentions":["bob"],"directives":[],"tags":[],"task_refs":["T12"],"origin":"external","external_since":"2026-10-02T10:00:00.000Z","external_source":"declared","hop":5,"local_names":["bob"]}`
	if string(e.Meta) != want {
		t.Errorf("after SetMeta:\n got %s\nwant %s", e.Meta, want)
	}
	if err := e.Check(); err != nil {
		t.Errorf("Check after SetMeta: %v", err)
	}
	if err := e.Sign("h", mustSigningKey(t, 1)); err != nil {
		t.Fatal(err)
	}
	if err := e.SetMeta("hop", 6); !errors.Is(err, ErrBadDraft) {
		t.Errorf("SetMeta after Sign = %v, want ErrBadDraft", err)
	}
}

func TestEnvelopeJSONMethods(t *testing.T) {
	e := mustBuild(t, simpleDraft())
	if err := e.Sign("alpha", mustSigningKey(t, 1)); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(struct{ E *Envelope }{e})
	if err != nil {
		t.Fatal(err)
	}
	var back struct{ E *Envelope }
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if err := back.E.Verify("alpha", mustSigningKey(t, 1).PublicKey()); err != nil {
		t.Errorf("envelope nested in JSON no longer verifies: %v", err)
	}
	if err := json.Unmarshal([]byte(`{"E":{"v":2}}`), &back); !errors.Is(err, ErrBadEnvelope) {
		t.Errorf("Unmarshal of a bad envelope = %v, want ErrBadEnvelope", err)
	}
}

// ---- fuzz -------------------------------------------------------------------------------------

func FuzzParseEnvelope(f *testing.F) {
	for _, c := range loadCases[envCase](f, "envelope.json") {
		for _, tg := range c.Targets {
			if len(tg.Wire) < 20000 {
				f.Add([]byte(tg.Wire))
			}
		}
		if c.Wire != "" {
			f.Add([]byte(c.Wire))
		}
		if c.SignedPlain != nil {
			f.Add([]byte(c.SignedPlain))
		}
	}
	f.Add([]byte(`{"v":3}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		e, err := ParseEnvelope(data)
		if err != nil {
			if !errors.Is(err, ErrBadEnvelope) {
				t.Fatalf("ParseEnvelope error %v is not ErrBadEnvelope", err)
			}
			return
		}
		in, err := e.SigningInput()
		// The signing input computed from the typed envelope is the canonical form of what was
		// received, computed directly from the generic tree.
		tree, perr := ParseJSON(data)
		if perr != nil {
			t.Fatalf("parsed an envelope from bytes ParseJSON refuses: %v", perr)
		}
		m := tree.(map[string]any)
		delete(m, "sig")
		if enc, ok := m["enc"].(map[string]any); ok {
			m["body"] = enc["body"]
		}
		direct, derr := Canonical(m)
		if (err == nil) != (derr == nil) || !bytes.Equal(in, direct) {
			t.Fatalf("signing input %q (%v) differs from canonical of what was received %q (%v)", in, err, direct, derr)
		}
		if err != nil {
			return
		}
		out, err := e.Marshal()
		if err != nil {
			t.Fatalf("Marshal of a parsed envelope: %v", err)
		}
		e2, err := ParseEnvelope(out)
		if err != nil {
			t.Fatalf("re-parse of Marshal output: %v\n%s", err, out)
		}
		in2, err := e2.SigningInput()
		if err != nil || !bytes.Equal(in, in2) {
			t.Fatalf("re-encoding changed the signed bytes:\n%s\n%s", in, in2)
		}
		if out2, _ := e2.Marshal(); !bytes.Equal(out, out2) {
			t.Fatalf("Marshal is not stable:\n%s\n%s", out, out2)
		}
		if e.Sig != nil {
			pub := "rVaWBmcprT7OEYgLEuHVEB40X7fBF/nJx+omHznb4P4=" // the vectors' sender
			if (e.Verify(e.Sig.Host, pub) == nil) != (e2.Verify(e.Sig.Host, pub) == nil) {
				t.Fatal("re-encoding changed the verdict")
			}
		}
	})
}

// ---- benchmarks -------------------------------------------------------------------------------

func BenchmarkSealOpen100KiB(b *testing.B) {
	host := mustSigningKey(b, 1)
	enc := mustEncKey(b, 2)
	d := simpleDraft()
	d.Body = strings.Repeat("line of a big log ✓\n", 100*1024/22)
	e := mustBuild(b, d)
	b.SetBytes(int64(len(d.Body)))
	for b.Loop() {
		_, wire, err := e.Seal(testRand(3), enc.PublicKey(), "alpha", host)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := Receive(wire, "alpha", host.PublicKey(), enc); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseVerifySmall(b *testing.B) {
	host := mustSigningKey(b, 1)
	e := mustBuild(b, simpleDraft())
	_, wire, err := e.Seal(testRand(3), mustEncKey(b, 2).PublicKey(), "alpha", host)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		p, err := ParseEnvelope(wire)
		if err != nil {
			b.Fatal(err)
		}
		if err := p.Verify("alpha", host.PublicKey()); err != nil {
			b.Fatal(err)
		}
	}
}
