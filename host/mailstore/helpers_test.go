package mailstore

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/bbolt"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/internal/testkit"
	"github.com/agentmbx/agentmbx/mbx"
)

// The buckets the fake host keeps in the store's file, so that what it records commits or rolls
// back with the store's transaction.
var (
	fakeAgents   = []byte("test_agents")   // agent → ""
	fakeSent     = []byte("test_sent")     // msg id → ""
	fakeReceipts = []byte("test_receipts") // origin ‖ msg id ‖ agent ‖ seq → state
)

// fakeHost is the host side of a test store: it registers agents and records receipts in the
// store's file, and counts the wake-ups.
type fakeHost struct {
	peers  []string
	mu     sync.Mutex
	kicks  int
	sendFn func(ctx context.Context, req api.SendRequest) (api.SendResult, error)
}

func (f *fakeHost) EnsureAgentTx(tx *bbolt.Tx, agent string, _ time.Time, _ string) error {
	return tx.Bucket(fakeAgents).Put([]byte(agent), nil)
}

func (f *fakeHost) QueueReceiptTx(tx *bbolt.Tx, origin, id, agent string, c Copy, _ time.Time) error {
	k := fmt.Sprintf("%s\x00%s\x00%s\x00%d", origin, id, agent, c.Seq)
	return tx.Bucket(fakeReceipts).Put([]byte(k), []byte(c.State.String()+" "+c.Note))
}

func (f *fakeHost) ReceiptsQueued() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.kicks++
}

func (f *fakeHost) kicked() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.kicks
}

func (f *fakeHost) SentTx(tx *bbolt.Tx, id string) bool {
	return tx.Bucket(fakeSent).Get([]byte(id)) != nil
}

func (f *fakeHost) PeersTx(*bbolt.Tx) ([]string, error) { return f.peers, nil }

func (f *fakeHost) Send(ctx context.Context, req api.SendRequest) (api.SendResult, error) {
	if f.sendFn == nil {
		return api.SendResult{}, fmt.Errorf("test host: no Send")
	}
	return f.sendFn(ctx, req)
}

// testStore is a Store of host "alpha" in a fresh bbolt file, with its fake host.
type testStore struct {
	*Store
	t     testing.TB
	db    *bbolt.DB
	fake  *fakeHost
	clock *testkit.Clock
	ulids *mbx.ULIDs
}

func newTestStore(t testing.TB, noSync bool) *testStore {
	t.Helper()
	db, err := bbolt.Open(filepath.Join(t.TempDir(), "state.db"), 0o600, &bbolt.Options{NoSync: noSync})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if err := db.Update(func(tx *bbolt.Tx) error {
		for _, b := range append([][]byte{fakeAgents, fakeSent, fakeReceipts}, Buckets...) {
			if _, err := tx.CreateBucket(b); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	clock := testkit.NewClock(time.Date(2026, 10, 2, 10, 0, 0, 0, time.UTC))
	fake := &fakeHost{}
	s := New(Config{DB: db, Name: "alpha", Clock: clock.Now, Host: fake})
	t.Cleanup(s.Close)
	return &testStore{Store: s, t: t, db: db, fake: fake, clock: clock, ulids: mbx.NewULIDs(testkit.Rand(1))}
}

// send stores a message from local agent from to local agents, as the host's Send does for
// local mail: the message, a copy for each recipient, the sent record and the sender's index.
func (ts *testStore) send(from string, to []string, subject, body string) api.SendResult {
	ts.t.Helper()
	now := ts.clock.Now()
	m := Message{ID: ts.ulids.New(now), TS: mbx.ISOTime(now), From: from + "@alpha", Subject: subject,
		Body: body, Kind: "message"}
	for _, a := range to {
		m.To = append(m.To, a+"@alpha")
	}
	if err := ts.db.Update(func(tx *bbolt.Tx) error {
		if err := ts.DeliverTx(tx, &m, to, now); err != nil {
			return err
		}
		if err := tx.Bucket(fakeSent).Put([]byte(m.ID), nil); err != nil {
			return err
		}
		return NoteSentTx(tx, from, m.ID, nil)
	}); err != nil {
		ts.t.Fatalf("send %s → %v: %v", from, to, err)
	}
	return api.SendResult{ID: m.ID}
}

// receive stores message m from host origin for local agents, as the receive path does.
func (ts *testStore) receive(m Message, agents ...string) {
	ts.t.Helper()
	if err := ts.db.Update(func(tx *bbolt.Tx) error {
		return ts.DeliverTx(tx, &m, agents, ts.clock.Now())
	}); err != nil {
		ts.t.Fatal(err)
	}
}

// receipts lists the receipts the store queued, as "origin msg agent seq state [note]".
func (ts *testStore) receipts() []string {
	ts.t.Helper()
	var out []string
	ts.db.View(func(tx *bbolt.Tx) error {
		return tx.Bucket(fakeReceipts).ForEach(func(k, v []byte) error {
			out = append(out, strings.TrimSpace(strings.ReplaceAll(string(k), "\x00", " ")+" "+string(v)))
			return nil
		})
	})
	return out
}

// counts returns the number of keys in each bucket of the file, to show that a refused request
// stored nothing.
func (ts *testStore) counts() map[string]int {
	ts.t.Helper()
	out := map[string]int{}
	if err := ts.db.View(func(tx *bbolt.Tx) error {
		return tx.ForEach(func(name []byte, b *bbolt.Bucket) error {
			out[string(name)] = b.Stats().KeyN
			return nil
		})
	}); err != nil {
		ts.t.Fatal(err)
	}
	return out
}

// ids and states list the ids and the states of a page of mail, in order.
func ids(ms []api.Message) []string {
	return testkit.Map(ms, func(m api.Message) string { return m.ID })
}

func states(ms []api.Message) []string {
	return testkit.Map(ms, func(m api.Message) string { return m.State })
}
