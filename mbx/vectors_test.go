package mbx

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The vectors come from $MBX_VECTORS_DIR when set (any vector set that follows the vectors
// README, e.g. a held-back one), else from the shared folder beside the checkout when it is
// there, else from the identical copy committed under testdata/.
const (
	sharedVectors    = "../../shared/vectors/agentmbx-0.5"
	committedVectors = "testdata/vectors/agentmbx-0.5"
)

// vectorsOverride, when set, is the set every vector test reads: TestPerturbedVectors points it
// at its generated copy while it runs the vector tests again.
var vectorsOverride string

func vectorDir() string {
	if vectorsOverride != "" {
		return vectorsOverride
	}
	if d := os.Getenv("MBX_VECTORS_DIR"); d != "" {
		return d
	}
	if _, err := os.Stat(sharedVectors); err == nil {
		return sharedVectors
	}
	return committedVectors
}

// loadCases reads the cases of one vector family. Any failure to read or decode is fatal: a
// family that does not load must not pass by checking nothing.
func loadCases[T any](t testing.TB, file string) []T {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(vectorDir(), file))
	if err != nil {
		t.Fatalf("load vectors: %v", err)
	}
	var f struct {
		Family string `json:"family"`
		Cases  []T    `json:"cases"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&f); err != nil {
		t.Fatalf("decode %s: %v", file, err)
	}
	if len(f.Cases) == 0 {
		t.Fatalf("%s has no cases", file)
	}
	return f.Cases
}

// TestVectorCopyMatchesShared keeps the committed copy identical to the shared set.
func TestVectorCopyMatchesShared(t *testing.T) {
	if _, err := os.Stat(sharedVectors); err != nil {
		t.Skip("shared vectors not beside this checkout; using the committed copy")
	}
	shared, err := os.ReadDir(sharedVectors)
	if err != nil {
		t.Fatal(err)
	}
	committed, err := os.ReadDir(committedVectors)
	if err != nil {
		t.Fatal(err)
	}
	if len(shared) != len(committed) {
		t.Fatalf("shared has %d files, testdata copy has %d", len(shared), len(committed))
	}
	for _, e := range shared {
		a, err := os.ReadFile(filepath.Join(sharedVectors, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(committedVectors, e.Name()))
		if err != nil {
			t.Fatalf("testdata copy lacks %s: %v", e.Name(), err)
		}
		if !bytes.Equal(a, b) {
			t.Errorf("testdata copy of %s differs from the shared one", e.Name())
		}
	}
}

// vectorTests are the tests driven by the vector files alone.
var vectorTests = map[string]func(*testing.T){
	"canonical": TestCanonicalVectors, "keys": TestKeyVectors, "sign": TestSignVectors,
	"ulid": TestULIDVectors, "enc_ad": TestEncAdVectors, "enrol": TestEnrolVectors,
	"envelope": TestEnvelopeVectors, "relay_expired": TestRelayExpiredVectors,
	"lan_hop": TestLANHopVectors, "relay_hop": TestRelayHopVectors, "pairing_code": TestPairingVectors,
	"receipt": TestReceiptVectors, "rotation": TestRotationVectors, "senders": TestSendersVectors,
	"relay_accept": TestRelayAcceptVectors,
}

// TestPerturbedVectors runs every vector test again on a perturbed copy of the set (see
// perturbVectors): other names, keys, times, ids and case counts, re-signed by the same rules.
// A test that knows the public set's values instead of reading them fails here. Cost: about a
// second (the signature search of the generator).
func TestPerturbedVectors(t *testing.T) {
	if vectorsOverride != "" {
		t.Skip("already running on a perturbed set")
	}
	src := vectorDir()
	dst := t.TempDir()
	perturbVectors(t, src, dst)
	if err := checkPerturbed(src, dst); err != nil {
		t.Fatal(err)
	}
	vectorsOverride = dst
	t.Cleanup(func() { vectorsOverride = "" })
	for name, test := range vectorTests {
		t.Run(name, test)
	}
}

// TestEveryVectorFamilyTested: each family file of the set (every *.json but the README) has its
// test in vectorTests, and each test its file, so "all families" in docs/development.md stays
// true when the set grows. The public 0.5 set has 15.
func TestEveryVectorFamilyTested(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(vectorDir(), "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no vector family in %s (%v)", vectorDir(), err)
	}
	inSet := map[string]bool{}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".json")
		inSet[name] = true
		if vectorTests[name] == nil {
			t.Errorf("family %s has no test in vectorTests", name)
		}
	}
	for name := range vectorTests {
		if !inSet[name] {
			t.Errorf("vectorTests names %s, which the set in %s lacks", name, vectorDir())
		}
	}
	t.Logf("%d families, each tested", len(files))
}
