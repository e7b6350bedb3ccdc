package mailstore

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"

	"go.etcd.io/bbolt"
)

// TestIntersectDescMatchesBruteForce checks the leapfrog join (intersectDesc) against set intersection on random
// lists.
func TestIntersectDescMatchesBruteForce(t *testing.T) {
	db, err := bbolt.Open(filepath.Join(t.TempDir(), "index.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 50 {
		n := 1 + rng.IntN(4)
		sets := make([]map[string]bool, n)
		err := db.Update(func(tx *bbolt.Tx) error {
			b, err := tx.CreateBucketIfNotExists([]byte("test"))
			if err != nil {
				return err
			}
			for i := range sets {
				sets[i] = map[string]bool{}
				for range rng.IntN(60) {
					id := fmt.Sprintf("%04d", rng.IntN(100))
					sets[i][id] = true
					if err := b.Put(key(fmt.Sprint("r", round, "l", i), id), nil); err != nil {
						return err
					}
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		var want, got []string
		for id := range sets[0] {
			if !slices.ContainsFunc(sets[1:], func(s map[string]bool) bool { return !s[id] }) {
				want = append(want, id)
			}
		}
		slices.Sort(want)
		slices.Reverse(want)
		db.View(func(tx *bbolt.Tx) error {
			var lists []*postings
			for i := range sets {
				lists = append(lists, newPostings(tx.Bucket([]byte("test")), fmt.Sprint("r", round, "l", i)))
			}
			intersectDesc(lists, func(id []byte) bool { got = append(got, string(id)); return true })
			return nil
		})
		if !slices.Equal(got, want) {
			t.Fatalf("round %d: got %v, want %v", round, got, want)
		}
	}
}
