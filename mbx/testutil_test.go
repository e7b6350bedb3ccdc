package mbx

import (
	"encoding/json"
	"testing"
)

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// checkSignedBytes is the fuzz targets' round-trip check of an accepted record: when the record
// as received has exactly the fields the type knows (fields), re-encoding the parsed value must give
// the canonical bytes of what was received, which are what its signature covers. It returns them.
func checkSignedBytes(t *testing.T, received map[string]any, fields int, signingInput func() ([]byte, error), what string) []byte {
	t.Helper()
	want, err := Canonical(received)
	if err != nil {
		t.Fatalf("accepted %s has no canonical form: %v", what, err)
	}
	got, err := signingInput()
	if err != nil {
		t.Fatal(err)
	}
	if len(received) == fields && string(got) != string(want) {
		t.Fatalf("re-encoded %s differs:\n got %s\nwant %s", what, got, want)
	}
	return want
}
