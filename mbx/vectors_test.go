package mbx

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// The vectors come from the shared folder beside the checkout when it is there, else from the
// identical copy committed under testdata/.
const (
	sharedVectors    = "../../shared/vectors/agentmbx-0.5"
	committedVectors = "testdata/vectors/agentmbx-0.5"
)

func vectorDir() string {
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
