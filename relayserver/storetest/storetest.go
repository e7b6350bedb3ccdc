// Package storetest is the contract of relayserver.Store as a test suite: every backend runs Run
// and must pass it unchanged.
//
// The suite covers what the relay relies on and what no backend may get wrong: a seq is never
// reused and never below the time floor, duplicates are refused, a failed unit rolls back alone
// (also inside a group of concurrent units), pull and ack page correctly, rotation follows the
// rules written on relayserver.Tx.Rotate, admission reads what its parts read, expiry keeps
// tombstones, and the store's epoch, relay key and heartbeat behave. What only one backend has
// (reopening a file, schema migrations, locks, commit hooks) stays in that backend's own tests.
package storetest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/relayserver"
)

// Run runs the whole suite. open must return a new, empty, open store for each call and arrange
// (t.Cleanup) for it to be closed; Close must be safe to call more than once, as the suite closes
// some stores itself.
func Run(t *testing.T, open func(t *testing.T) relayserver.Store) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.fn(t, open(t)) })
	}
}

var cases = []struct {
	name string
	fn   func(t *testing.T, s relayserver.Store)
}{
	{"NewStoreMeta", testNewStoreMeta},
	{"SeqIsMaxOfNextAndNowAndNeverReused", testSeqNeverReused},
	{"SeqNotReusedAfterExpiryOrRotation", testSeqNotReusedAfterDelete},
	{"DuplicateInsertRefused", testDuplicateInsertRefused},
	{"FailedUnitStoresNothing", testFailedUnitStoresNothing},
	{"FailedUnitAmongConcurrentUnits", testFailedUnitAmongConcurrent},
	{"PullPagesAndAck", testPullPagesAndAck},
	{"EnrolmentNamesAndRevocation", testEnrolmentNamesAndRevocation},
	{"EncAds", testEncAds},
	{"SenderListAllowed", testSenderListAllowed},
	{"RotateMovesQueueAfterNewKeysItems", testRotate},
	{"RotateCarriesSenderRowsAndIsRetrySafe", testRotateSenderRows},
	{"AdmissionMatchesParts", testAdmissionMatchesParts},
	{"ExpiryPrimitives", testExpiryPrimitives},
	{"BindRelayKey", testBindRelayKey},
	{"RotateEpochAndHeartbeat", testRotateEpochAndHeartbeat},
	{"ChallengeSecretIsMadeOnce", testChallengeSecret},
	{"TotalsOfAllQueues", testTotals},
	{"ClosedStoreRefusesUpdates", testClosedStoreRefusesUpdates},
	{"DenyList", testDenyList},
	{"DedupRowsChargedToSenders", testDedupCharge},
	{"ReclaimDeletesWhatAKeyHolds", testReclaim},
}

var ctx = context.Background()

// T0 is a realistic accept time (unix ms) for items of the suite and of backends' benchmarks.
var T0 = time.UnixMilli(1773480413589)

// Key returns a distinct fake public key for n (the store treats keys as opaque strings).
func Key(n int) string { return fmt.Sprintf("%043d=", n) }

// Hash is the wire hash the relay records: hex SHA-256.
func Hash(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

// NewItem is an envelope from sender for target accepted at unix ms at, expiring 14 days later.
func NewItem(target, sender, id string, wire string, at int64) relayserver.Item {
	return relayserver.Item{Target: target, Kind: relayserver.KindEnvelope, ItemID: id, Sender: sender,
		Wire: []byte(wire), WireHash: Hash([]byte(wire)), AcceptedAt: time.UnixMilli(at),
		ExpiresAt: time.UnixMilli(at + 14*86400_000)}
}

// Insert stores it in a unit of its own and returns its seq; failures end the test.
func Insert(t testing.TB, s relayserver.Store, it relayserver.Item) int64 {
	t.Helper()
	var seq int64
	err := s.Update(ctx, func(tx relayserver.Tx) error {
		var err error
		seq, err = tx.InsertItem(it)
		return err
	})
	if err != nil {
		t.Fatalf("InsertItem(%s): %v", it.ItemID, err)
	}
	return seq
}

// Ack acknowledges target's queue through seq in a unit of its own.
func Ack(t testing.TB, s relayserver.Store, target string, through int64) relayserver.AckResult {
	t.Helper()
	var res relayserver.AckResult
	err := s.Update(ctx, func(tx relayserver.Tx) error {
		var err error
		res, err = tx.Ack(target, through)
		return err
	})
	if err != nil {
		t.Fatalf("Ack(%d): %v", through, err)
	}
	return res
}

func usage(t *testing.T, s relayserver.Store, target, sender string) relayserver.Usage {
	t.Helper()
	var u relayserver.Usage
	if err := s.Update(ctx, func(tx relayserver.Tx) error {
		var err error
		u, err = tx.Usage(target, sender)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return u
}

func enrol(t *testing.T, s relayserver.Store, e relayserver.Enrolment) error {
	t.Helper()
	return s.Update(ctx, func(tx relayserver.Tx) error { return tx.PutEnrolment(e) })
}

func pullAll(t *testing.T, s relayserver.Store, target string) relayserver.Page {
	t.Helper()
	p, err := s.Pull(ctx, target, 0, 1000, 1<<30)
	if err != nil {
		t.Fatalf("Pull(%s): %v", target, err)
	}
	return p
}
