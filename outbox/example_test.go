package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"go.etcd.io/bbolt"

	"github.com/agentmbx/agentmbx/outbox"
)

// A sender's life: add a row, fail over the LAN, get it accepted by the relay, settle it with the
// target's delivery receipt (in one transaction with the host's own receipt bucket), and see a
// second row expire after 72 hours.
func Example() {
	dir, _ := os.MkdirTemp("", "outbox-example")
	defer os.RemoveAll(dir)
	db, err := bbolt.Open(filepath.Join(dir, "host.db"), 0o600, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()

	now := time.Date(2026, 10, 2, 10, 0, 0, 0, time.UTC)
	store, err := outbox.Open(db, &outbox.Options{Clock: func() time.Time { return now },
		Jitter: func() float64 { return 0.5 }}) // no jitter, so that the output below is fixed
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	key := "MCowBQYDK2VwAyEAGb9ECWmEzf6FQbrBZ9w7lshQhqw="
	_, err = store.Add(ctx,
		outbox.NewRow{Kind: outbox.KindEnvelope, ItemID: "01JAAAAAAAAAAAAAAAAAAAAAAA", Host: "work",
			HostKey: key, Wire: []byte(`{"v":3,"id":"01JAAAAAAAAAAAAAAAAAAAAAAA"}`), Agent: "alice", Subject: "report"},
		outbox.NewRow{Kind: outbox.KindEnvelope, ItemID: "01JBBBBBBBBBBBBBBBBBBBBBBB", Host: "laptop",
			HostKey: key, Wire: []byte(`{"v":3,"id":"01JBBBBBBBBBBBBBBBBBBBBBBB"}`), Agent: "alice", Subject: "notes"})
	if err != nil {
		log.Fatal(err)
	}

	due, _ := store.Due(ctx, 0)
	fmt.Println("due:", len(due))
	work := outbox.Key{ItemID: "01JAAAAAAAAAAAAAAAAAAAAAAA", Host: "work"}
	r, _ := store.MarkAttemptFailed(ctx, work, outbox.TransportLAN, errors.New("connection refused"))
	fmt.Println("after a LAN failure:", r.State, "next in", r.NextAt.Sub(now))

	r, _ = store.MarkRelayAccepted(ctx, work, outbox.Acceptance{
		Relay: "https://relay.example", Epoch: "E1", Seq: 1759399200000,
		Statement: []byte(`{"type":"relay-accept"}`), Sig: "c2ln", AcceptedAt: now, Retention: 14 * 24 * time.Hour,
	})
	fmt.Println("accepted:", r.State, "deadline", r.Deadline.Format(time.DateOnly))

	err = db.Update(func(tx *bbolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists([]byte("receipts")) // the host's own state
		if err != nil {
			return err
		}
		if err := b.Put([]byte("01JAAAAAAAAAAAAAAAAAAAAAAA/bob@work"), []byte("delivered")); err != nil {
			return err
		}
		r, from, err := store.In(tx).Settle("01JAAAAAAAAAAAAAAAAAAAAAAA", "work")
		fmt.Println("settled:", from, "→", r.State)
		return err
	})
	if err != nil {
		log.Fatal(err)
	}

	now = now.Add(72 * time.Hour)
	ended, _ := store.Sweep(ctx, 0)
	for _, r := range ended {
		if a, ok := outbox.AlertFor(r, false); ok {
			fmt.Printf("alert to %s: %s\n", a.Agent, a.Subject)
		}
	}
	// Output:
	// due: 2
	// after a LAN failure: pending next in 5s
	// accepted: relay-accepted deadline 2026-10-17
	// settled: relay-accepted → done
	// alert to alice: Undelivered to laptop: notes
}
