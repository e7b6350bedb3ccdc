package sqlitestore

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

// Reads on a pool of one read connection, and more concurrent first reads than the pool has
// connections, all finish: a read that holds a connection never waits for a second one (as
// preparing a statement for the pool would), so no read waits for another forever.
func TestReadsNeverWaitForASecondConnection(t *testing.T) {
	for _, readers := range []int{1, 2} {
		t.Run(fmt.Sprintf("readers=%d", readers), func(t *testing.T) {
			s, err := Open(ctx, t.TempDir(), &Options{LockWait: 200 * time.Millisecond, Readers: readers})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			tgt := key(1)
			for i := range 3 {
				insert(t, s, item(tgt, key(2), fmt.Sprintf("i%d", i), "wire", 1000))
			}
			// Generous: a deadlock waits forever, a healthy read takes milliseconds.
			rctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			var wg sync.WaitGroup
			errs := make([]error, 4*readers)
			for i := range errs {
				wg.Go(func() {
					p, err := s.Pull(rctx, tgt, 0, 10, 1<<20)
					if err == nil && len(p.Items) != 3 {
						err = fmt.Errorf("pulled %d items, want 3", len(p.Items))
					}
					errs[i] = err
				})
			}
			wg.Wait()
			for i, err := range errs {
				if err != nil {
					t.Fatalf("pull %d: %v", i, err)
				}
			}
		})
	}
}
