package peers_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"go.etcd.io/bbolt"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/host/peers"
	"github.com/agentmbx/agentmbx/internal/testkit"
	"github.com/agentmbx/agentmbx/mbx"
)

func openDB(t *testing.T) *bbolt.DB { return testkit.BoltDB(t, peers.Bucket) }

func pubkey(t *testing.T, seed uint64) string {
	t.Helper()
	k, err := mbx.GenerateSigningKey(testkit.Rand(seed))
	if err != nil {
		t.Fatal(err)
	}
	return k.PublicKey()
}

func pin(db *bbolt.DB, p peers.Record) (rebind bool, err error) {
	err = db.Update(func(tx *bbolt.Tx) error {
		rebind, err = peers.Pin(tx, &p)
		return err
	})
	return rebind, err
}

// TestPinKeepsAKeyToOneName: a host key is pinned under one name, a pinned name keeps its key
// unless the new record retires it (then rebind), and an update keeps what the old record knew
// (the old enc key retired, the address, when it was first pinned).
func TestPinKeepsAKeyToOneName(t *testing.T) {
	db := openDB(t)
	k1, k2, e1, e2 := pubkey(t, 1), pubkey(t, 2), pubkey(t, 3), pubkey(t, 4)
	first := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if rebind, err := pin(db, peers.Record{Host: "beta", HostPubkey: k1, EncPub: e1, Addr: "10.0.0.2:7373", AddedAt: first}); err != nil || rebind {
		t.Fatalf("first pin: rebind %v, %v", rebind, err)
	}
	if _, err := pin(db, peers.Record{Host: "gamma", HostPubkey: k1, EncPub: e2}); !errors.Is(err, api.ErrPeerKeyInUse) {
		t.Fatalf("the same key under another name: %v, want ErrPeerKeyInUse", err)
	}
	if _, err := pin(db, peers.Record{Host: "beta", HostPubkey: k2, EncPub: e2}); !errors.Is(err, api.ErrPeerKeyMismatch) {
		t.Fatalf("another key under a pinned name: %v, want ErrPeerKeyMismatch", err)
	}
	rebind, err := pin(db, peers.Record{Host: "beta", HostPubkey: k2, EncPub: e2, RetiredKeys: []string{k1}, AddedAt: first.Add(time.Hour)})
	if err != nil || !rebind {
		t.Fatalf("a new key retiring the pinned one: rebind %v, %v; want a rebind", rebind, err)
	}
	if _, err := pin(db, peers.Record{Host: "gamma", HostPubkey: k1, EncPub: e1}); !errors.Is(err, api.ErrPeerKeyInUse) {
		t.Fatalf("a retired key under another name: %v, want ErrPeerKeyInUse", err)
	}
	_ = db.View(func(tx *bbolt.Tx) error {
		p, err := peers.Get(tx, "beta")
		if err != nil || p.HostPubkey != k2 || !slices.Equal(p.RetiredKeys, []string{k1}) ||
			!slices.Equal(p.RetiredEncKeys, []string{e1}) || p.Addr != "10.0.0.2:7373" || !p.AddedAt.Equal(first) {
			t.Fatalf("beta after the rotation = %+v, %v", p, err)
		}
		if !p.KnowsKey(k1) || !p.KnowsKey(k2) || p.KnowsKey(e1) || p.KnowsKey("") || p.KeyFor(mbx.Fingerprint(k1)) != k1 {
			t.Fatalf("KnowsKey/KeyFor of %+v", p)
		}
		if by, err := peers.ByKey(tx, k1); err != nil || by.Host != "beta" {
			t.Fatalf("ByKey(retired) = %+v, %v", by, err)
		}
		if _, err := peers.ByKey(tx, e2); !errors.Is(err, api.ErrUnpaired) {
			t.Fatalf("ByKey(unknown) = %v, want ErrUnpaired", err)
		}
		return nil
	})
	if err := db.Update(func(tx *bbolt.Tx) error { return peers.Remove(tx, "beta") }); err != nil {
		t.Fatal(err)
	}
	_ = db.Update(func(tx *bbolt.Tx) error {
		if _, err := peers.Get(tx, "beta"); !errors.Is(err, api.ErrUnpaired) {
			t.Fatalf("Get after Remove: %v, want ErrUnpaired", err)
		}
		if err := peers.Remove(tx, "beta"); !errors.Is(err, api.ErrNotFound) {
			t.Fatalf("Remove twice: %v, want ErrNotFound", err)
		}
		return nil
	})
}

// TestValidateAndCorruptRecords: bad names, keys and addresses are api.ErrInvalid; a record
// that does not decode is api.ErrCorrupt, for Get and List alike.
func TestValidateAndCorruptRecords(t *testing.T) {
	k, e := pubkey(t, 1), pubkey(t, 2)
	for name, p := range map[string]peers.Record{
		"name":    {Host: "Not A Host", HostPubkey: k, EncPub: e},
		"key":     {Host: "beta", HostPubkey: "short", EncPub: e},
		"enc":     {Host: "beta", HostPubkey: k, EncPub: "short"},
		"addr":    {Host: "beta", HostPubkey: k, EncPub: e, Addr: "no-port"},
		"port":    {Host: "beta", HostPubkey: k, EncPub: e, Addr: "h:99999"},
		"retired": {Host: "beta", HostPubkey: k, EncPub: e, RetiredKeys: []string{"x"}},
	} {
		if err := p.Validate(); !errors.Is(err, api.ErrInvalid) {
			t.Errorf("%s: Validate = %v, want ErrInvalid", name, err)
		}
	}
	if ok := (peers.Record{Host: "beta", HostPubkey: k, EncPub: e, Addr: ":7373"}); ok.Validate() != nil {
		t.Errorf("a listen-style address was refused: %v", ok.Validate())
	}
	db := openDB(t)
	_ = db.Update(func(tx *bbolt.Tx) error {
		if err := tx.Bucket(peers.Bucket).Put([]byte("beta"), []byte("{not json")); err != nil {
			t.Fatal(err)
		}
		if _, err := peers.Get(tx, "beta"); !errors.Is(err, api.ErrCorrupt) {
			t.Errorf("Get of a corrupt record: %v", err)
		}
		if _, err := peers.List(tx); !errors.Is(err, api.ErrCorrupt) {
			t.Errorf("List with a corrupt record: %v", err)
		}
		return nil
	})
}
