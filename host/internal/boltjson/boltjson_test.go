package boltjson

import (
	"errors"
	"path/filepath"
	"slices"
	"testing"

	"go.etcd.io/bbolt"

	"github.com/agentmbx/agentmbx/api"
)

type rec struct{ N int }

func TestAllInKeyOrderAndCorruptNamed(t *testing.T) {
	db, err := bbolt.Open(filepath.Join(t.TempDir(), "t.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	name := []byte("b")
	err = db.Update(func(tx *bbolt.Tx) error {
		b, err := tx.CreateBucket(name)
		if err != nil {
			return err
		}
		for _, k := range []string{"c", "a", "b"} {
			if err := Put(b, []byte(k), rec{N: int(k[0])}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	_ = db.View(func(tx *bbolt.Tx) error {
		got, err := All[rec](tx.Bucket(name))
		if err != nil || !slices.Equal(got, []rec{{'a'}, {'b'}, {'c'}}) {
			t.Fatalf("All = %v, %v; want a, b, c in key order", got, err)
		}
		return nil
	})
	_ = db.Update(func(tx *bbolt.Tx) error { return tx.Bucket(name).Put([]byte("d"), []byte("{")) })
	_ = db.View(func(tx *bbolt.Tx) error {
		if _, err := All[rec](tx.Bucket(name)); !errors.Is(err, api.ErrCorrupt) {
			t.Fatalf("All over a value that does not decode = %v, want api.ErrCorrupt", err)
		}
		return nil
	})
}
