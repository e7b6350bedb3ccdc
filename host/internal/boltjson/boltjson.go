// Package boltjson reads and writes JSON values in a bbolt bucket, the way the host's stores keep
// their records: a value that does not decode is api.ErrCorrupt, naming its key.
package boltjson

import (
	"encoding/json"
	"fmt"

	"go.etcd.io/bbolt"

	"github.com/agentmbx/agentmbx/api"
)

// Get decodes the value of key into v; found is false (and v untouched) when there is none.
func Get(b *bbolt.Bucket, key []byte, v any) (found bool, err error) {
	raw := b.Get(key)
	if raw == nil {
		return false, nil
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return true, fmt.Errorf("%w: %s %q: %v", api.ErrCorrupt, "record", key, err)
	}
	return true, nil
}

// Put stores v as JSON under key.
func Put(b *bbolt.Bucket, key []byte, v any) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return b.Put(key, raw)
}

// All decodes every value of b, in key order.
func All[T any](b *bbolt.Bucket) ([]T, error) {
	var out []T
	err := b.ForEach(func(k, _ []byte) error {
		var v T
		if _, err := Get(b, k, &v); err != nil {
			return err
		}
		out = append(out, v)
		return nil
	})
	return out, err
}
