package agents_test

import (
	"errors"
	"testing"
	"time"

	"go.etcd.io/bbolt"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/host/agents"
	"github.com/agentmbx/agentmbx/internal/testkit"
)

var now = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func openDB(t *testing.T) *bbolt.DB { return testkit.BoltDB(t, agents.Bucket) }

func list(t *testing.T, db *bbolt.DB) []agents.Record {
	t.Helper()
	var out []agents.Record
	if err := db.View(func(tx *bbolt.Tx) (err error) { out, err = agents.List(tx); return err }); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestEnsureThenAdd: mail registers an agent once, marked as made by its sender, and never the
// owner; registering it adopts it (the mark goes) and sets its role; an empty role keeps it.
func TestEnsureThenAdd(t *testing.T) {
	db := openDB(t)
	if err := db.Update(func(tx *bbolt.Tx) error {
		for _, n := range []string{"bob", "bob", agents.Owner} {
			if err := agents.Ensure(tx, n, now, "eve@beta"); err != nil {
				return err
			}
		}
		return agents.Ensure(tx, "bob", now.Add(time.Hour), "mallory@gamma") // exists: untouched
	}); err != nil {
		t.Fatal(err)
	}
	if got := list(t, db); len(got) != 1 || got[0].Name != "bob" || got[0].CreatedBy != "eve@beta" || got[0].AddedAt != "2026-01-02T03:04:05.000Z" {
		t.Fatalf("after mail: %+v", got)
	}
	for _, a := range []api.Agent{{Name: "bob", Role: "reviewer"}, {Name: "bob"}} {
		if err := db.Update(func(tx *bbolt.Tx) error { _, err := agents.Add(tx, a, now.Add(time.Hour)); return err }); err != nil {
			t.Fatal(err)
		}
	}
	if got := list(t, db); len(got) != 1 || got[0].Role != "reviewer" || got[0].CreatedBy != "" || got[0].AddedAt != "2026-01-02T03:04:05.000Z" {
		t.Fatalf("after add: %+v", got)
	}
}

// TestAddRefusesBadNamesAndChangesNothing: reserved names, bad names and bad roles are refused
// before anything is stored.
func TestAddRefusesBadNamesAndChangesNothing(t *testing.T) {
	db := openDB(t)
	for _, tt := range []struct {
		a    api.Agent
		want error
	}{
		{api.Agent{Name: agents.MBX}, api.ErrReserved},
		{api.Agent{Name: agents.Owner}, api.ErrReserved},
		{api.Agent{Name: "Bob"}, api.ErrInvalid},
		{api.Agent{Name: "-bob"}, api.ErrInvalid},
		{api.Agent{Name: "bob", Role: "Has Spaces"}, api.ErrInvalid},
	} {
		err := db.Update(func(tx *bbolt.Tx) error { _, err := agents.Add(tx, tt.a, now); return err })
		if !errors.Is(err, tt.want) {
			t.Errorf("Add(%+v) = %v, want %v", tt.a, err, tt.want)
		}
	}
	if got := list(t, db); len(got) != 0 {
		t.Fatalf("refused adds stored %+v", got)
	}
	_ = db.Update(func(tx *bbolt.Tx) error {
		if err := tx.Bucket(agents.Bucket).Put([]byte("zed"), []byte("{")); err != nil {
			t.Fatal(err)
		}
		if _, err := agents.List(tx); !errors.Is(err, api.ErrCorrupt) {
			t.Errorf("List with a corrupt record: %v", err)
		}
		return nil
	})
}
