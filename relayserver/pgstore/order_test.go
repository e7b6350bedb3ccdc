package pgstore

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/relayserver"
	"github.com/agentmbx/agentmbx/relayserver/storetest"
)

// pushUnit is the relay's push unit for one item: admission under the target's lock, then the
// insert. It returns the seq.
func pushUnit(s relayserver.Store, it relayserver.Item) (int64, error) {
	var seq int64
	err := s.Update(ctx, func(tx relayserver.Tx) error {
		a, err := tx.Admission(it.Sender, it.ItemID, it.Target)
		if err != nil {
			return err
		}
		if a.Duplicate {
			seq = a.Dedup.Seq
			return nil
		}
		if !a.Enrolled || !a.Allowed {
			return fmt.Errorf("admission refused: %+v", a)
		}
		seq, err = tx.InsertItem(it)
		return err
	})
	return seq, err
}

// TestOrderingInvariantAcrossReplicas: many pushers on three store instances (three relay
// replicas) push to one target as fast as they can while a puller on all three pulls after what
// it acked and acks each page at once. A seq that committed after a higher one was pulled would
// end below the ack point: deleted by a later ack, or never shown. Every accepted item must reach
// the puller exactly once, with the seq its push was told, in increasing seq order.
func TestOrderingInvariantAcrossReplicas(t *testing.T) {
	const replicas, pushers, perPusher = 3, 24, 60 // 1,440 items
	first, url := openT(t, nil)
	stores := []*Store{first}
	for range replicas - 1 {
		s, err := Open(ctx, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		stores = append(stores, s)
	}
	tgt := storetest.Key(1)
	if err := first.Update(ctx, func(tx relayserver.Tx) error {
		return tx.PutEnrolment(relayserver.Enrolment{HostPubkey: tgt, HostName: "target", AuthorizedBy: "host-key",
			EnrolledAt: storetest.T0})
	}); err != nil {
		t.Fatal(err)
	}

	var (
		mu       sync.Mutex
		accepted = map[string]int64{} // item id → seq told to the pusher
		wg       sync.WaitGroup
		pushing  atomic.Int64
	)
	pushing.Store(pushers)
	for p := range pushers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer pushing.Add(-1)
			s := stores[p%replicas]
			sender := storetest.Key(100 + p)
			for i := range perPusher {
				id := fmt.Sprintf("p%d-%d", p, i)
				at := storetest.T0.UnixMilli() + int64(i) // clocks of replicas disagree a little
				seq, err := pushUnit(s, storetest.NewItem(tgt, sender, id, id, at-int64(p%3)))
				if err != nil {
					t.Errorf("push %s: %v", id, err)
					return
				}
				mu.Lock()
				accepted[id] = seq
				mu.Unlock()
			}
		}()
	}

	received := map[string]int64{}
	var order []int64
	var acked int64
	pull := func(s *Store) (int, error) {
		p, err := s.Pull(ctx, tgt, acked, 100, 1<<20)
		if err != nil || len(p.Items) == 0 {
			return 0, err
		}
		for _, it := range p.Items {
			if _, dup := received[it.ItemID]; dup {
				return 0, fmt.Errorf("item %s delivered twice", it.ItemID)
			}
			if it.Seq <= acked {
				return 0, fmt.Errorf("item %s at seq %d, at or below the ack point %d", it.ItemID, it.Seq, acked)
			}
			received[it.ItemID] = it.Seq
			order = append(order, it.Seq)
		}
		last := p.Items[len(p.Items)-1].Seq
		err = stores[len(order)%replicas].Update(ctx, func(tx relayserver.Tx) error {
			_, err := tx.Ack(tgt, last)
			return err
		})
		acked = last
		return len(p.Items), err
	}
	deadline := time.Now().Add(5 * time.Minute)
	for n := 0; ; n++ {
		got, err := pull(stores[n%replicas])
		if err != nil {
			t.Fatal(err)
		}
		if got == 0 && pushing.Load() == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still pulling after 5 minutes: %d received", len(received))
		}
	}
	wg.Wait()
	if _, err := pull(first); err != nil { // whatever the last pushes committed
		t.Fatal(err)
	}

	if len(accepted) != pushers*perPusher {
		t.Fatalf("%d pushes accepted, want %d", len(accepted), pushers*perPusher)
	}
	var lost []string
	for id, seq := range accepted {
		got, ok := received[id]
		switch {
		case !ok:
			lost = append(lost, id)
		case got != seq:
			t.Errorf("item %s pulled at seq %d, its push was told %d", id, got, seq)
		}
	}
	if len(lost) > 0 {
		t.Fatalf("%d accepted items never reached the puller (a gap filled after the ack): %v", len(lost), lost[:min(len(lost), 10)])
	}
	for i := 1; i < len(order); i++ {
		if order[i] <= order[i-1] {
			t.Fatalf("seq %d pulled after %d", order[i], order[i-1])
		}
	}
	p, err := first.Pull(ctx, tgt, 0, 10, 1<<20)
	if err != nil || len(p.Items) != 0 || p.HeadSeq != order[len(order)-1] || p.AckedThrough != p.HeadSeq {
		t.Fatalf("final queue = %+v, %v; want empty, head %d acked", p, err, order[len(order)-1])
	}
	var retries int64
	for _, s := range stores {
		retries += s.Stats().Retries
	}
	t.Logf("%d items through 3 replicas in seq order; %d units re-run after a lost lock", len(order), retries)
}
