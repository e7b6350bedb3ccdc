package mbx

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestKeyVectors(t *testing.T) {
	type tc struct {
		Name        string `json:"name"`
		Kind        string `json:"kind"`
		Seed        string `json:"seed_b64"`
		PublicKey   string `json:"publicKey"`
		PrivateKey  string `json:"privateKey"`
		Fingerprint string `json:"fingerprint"`
		Expect      string `json:"expect"`
	}
	for _, c := range loadCases[tc](t, "keys.json") {
		t.Run(c.Name, func(t *testing.T) {
			switch c.Kind {
			case "ed25519":
				k, err := SigningKeyFromSeed(c.Seed)
				if c.Expect == "error" {
					if !errors.Is(err, ErrBadKey) {
						t.Fatalf("err = %v, want ErrBadKey", err)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				if k.PublicKey() != c.PublicKey || k.Seed() != c.PrivateKey || k.Fingerprint() != c.Fingerprint {
					t.Errorf("got %s %s %s, want %s %s %s", k.PublicKey(), k.Seed(), k.Fingerprint(), c.PublicKey, c.PrivateKey, c.Fingerprint)
				}
				back, err := SigningKeyFromFile(mustJSON(t, k.File()))
				if err != nil || back.Seed() != k.Seed() {
					t.Errorf("key file round trip: %v", err)
				}
			case "x25519":
				k, err := EncKeyFromPrivate(c.PrivateKey)
				if err != nil {
					t.Fatal(err)
				}
				if k.PublicKey() != c.PublicKey {
					t.Errorf("public %s, want %s", k.PublicKey(), c.PublicKey)
				}
				back, err := EncKeyFromFile(mustJSON(t, k.File()))
				if err != nil || back.Private() != k.Private() {
					t.Errorf("key file round trip: %v", err)
				}
			case "fingerprint":
				if got := Fingerprint(c.PublicKey); got != c.Fingerprint {
					t.Errorf("Fingerprint(%q) = %s, want %s", c.PublicKey, got, c.Fingerprint)
				}
			default:
				t.Fatalf("unknown kind %q", c.Kind)
			}
		})
	}
}

func TestSignVectors(t *testing.T) {
	type tc struct {
		Name       string `json:"name"`
		Op         string `json:"op"`
		PrivateKey string `json:"privateKey"`
		PublicKey  string `json:"publicKey"`
		Data       string `json:"data"`
		DataB64    string `json:"data_utf8_b64"`
		Signature  string `json:"signature"`
		Verify     bool   `json:"verify"`
		Expected   bool   `json:"expected"`
	}
	for _, c := range loadCases[tc](t, "sign.json") {
		t.Run(c.Name, func(t *testing.T) {
			switch c.Op {
			case "sign":
				data, err := base64.StdEncoding.DecodeString(c.DataB64)
				if err != nil || !bytes.Equal(data, []byte(c.Data)) {
					t.Fatalf("data_utf8_b64 does not match data: %v", err)
				}
				k, err := SigningKeyFromSeed(c.PrivateKey)
				if err != nil {
					t.Fatal(err)
				}
				if got := k.Sign(data); got != c.Signature {
					t.Errorf("signature %s, want %s", got, c.Signature)
				}
				if got := Verify(c.PublicKey, data, c.Signature); got != c.Verify {
					t.Errorf("Verify = %v, want %v", got, c.Verify)
				}
			case "verify":
				if got := Verify(c.PublicKey, []byte(c.Data), c.Signature); got != c.Expected {
					t.Errorf("Verify = %v, want %v", got, c.Expected)
				}
			default:
				t.Fatalf("unknown op %q", c.Op)
			}
		})
	}
}

func TestParseFingerprint(t *testing.T) {
	k, _ := SigningKeyFromSeed("cpSvM9EeBH4U8xp2w40Err6TZANeiBdqn1TQC4aj9Ks=")
	fp := k.Fingerprint()
	for _, in := range []string{fp, strings.ToUpper(fp), strings.ReplaceAll(fp, "-", ":"), strings.ReplaceAll(fp, "-", " "), strings.ReplaceAll(fp, "-", ""), " " + k.PublicKey() + " ",
		"ed25519:" + fp, "ED25519:" + strings.ToUpper(fp), k.LogValue().String(), "ed25519:" + k.PublicKey()} {
		got, err := ParseFingerprint(in)
		if err != nil || got != fp {
			t.Errorf("ParseFingerprint(%q) = %q, %v; want %q", in, got, err, fp)
		}
	}
	for _, in := range []string{"", "6803-4ece-82f9", "6803-4ece-82f9-572g", "6803-4ece-82f9-572f-00", "ed25519:", "ed25519:6803-4ece-82f9", "x25519:" + fp} {
		if _, err := ParseFingerprint(in); !errors.Is(err, ErrBadFingerprint) {
			t.Errorf("ParseFingerprint(%q) err = %v, want ErrBadFingerprint", in, err)
		}
	}
}

func TestKeysNeverPrintSecrets(t *testing.T) {
	k, err := GenerateSigningKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	e, err := GenerateEncKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{fmt.Sprint(k), fmt.Sprintf("%#v %+v %s %v", k, k, k, k), fmt.Sprint(e), fmt.Sprintf("%#v", e), fmt.Errorf("wrap %v", k).Error()} {
		if strings.Contains(s, k.Seed()) || strings.Contains(s, e.Private()) {
			t.Fatalf("secret printed: %s", s)
		}
	}
	if !ValidPublicKey(k.PublicKey()) || ValidPublicKey(strings.TrimRight(k.PublicKey(), "=")) {
		t.Error("ValidPublicKey is not strict about the wire spelling")
	}
}

func TestEncKeySharedSecretAgrees(t *testing.T) {
	a, _ := GenerateEncKey(rand.Reader)
	b, _ := GenerateEncKey(rand.Reader)
	s1, err1 := a.SharedSecret(b.PublicKey())
	s2, err2 := b.SharedSecret(a.PublicKey())
	if err1 != nil || err2 != nil || !bytes.Equal(s1, s2) {
		t.Fatalf("shared secrets differ: %v %v", err1, err2)
	}
	if _, err := a.SharedSecret("AAAA"); !errors.Is(err, ErrBadKey) {
		t.Errorf("short peer key: err = %v", err)
	}
}

func TestKeyFileRefusesMismatch(t *testing.T) {
	k, _ := GenerateSigningKey(rand.Reader)
	other, _ := GenerateSigningKey(rand.Reader)
	f := k.File()
	f.PublicKey = other.PublicKey()
	if _, err := SigningKeyFromFile(mustJSON(t, f)); !errors.Is(err, ErrBadKey) {
		t.Errorf("mismatched key file: err = %v", err)
	} else if strings.Contains(err.Error(), k.Seed()) {
		t.Error("error echoes the seed")
	}
	if _, err := SigningKeyFromFile([]byte("not json")); !errors.Is(err, ErrBadKey) {
		t.Errorf("garbage key file: err = %v", err)
	}
}

// strictKey is ValidPublicKey by decoding: strict padded standard base64 of 32 bytes.
func strictKey(s string) bool {
	b, err := base64.StdEncoding.Strict().DecodeString(s)
	return err == nil && len(b) == 32 && len(s) == 44
}

// ValidPublicKey, which decodes nothing, accepts exactly the strings a strict decoder reads as 32
// bytes: every character of the spelling varied at every position of a real key.
func TestValidPublicKeyIsTheStrictDecoder(t *testing.T) {
	k, err := GenerateSigningKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	pub := k.PublicKey()
	cases := []string{"", "=", pub, pub + "=", pub[:43], pub[:42] + "==", strings.Repeat("A", 44), strings.Repeat("A", 43) + "=",
		strings.Repeat("/", 43) + "=", strings.Repeat("A", 40) + "\nAAA=", strings.Repeat("_", 43) + "="}
	for pos := range 44 {
		for c := range 256 {
			b := []byte(pub)
			b[pos] = byte(c)
			cases = append(cases, string(b))
		}
	}
	for _, s := range cases {
		if got, want := ValidPublicKey(s), strictKey(s); got != want {
			t.Fatalf("ValidPublicKey(%q) = %v, the strict decoder says %v", s, got, want)
		}
	}
}

func FuzzValidPublicKey(f *testing.F) {
	f.Add("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=")
	f.Add("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAB=")
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := ValidPublicKey(s), strictKey(s); got != want {
			t.Fatalf("ValidPublicKey(%q) = %v, the strict decoder says %v", s, got, want)
		}
	})
}
