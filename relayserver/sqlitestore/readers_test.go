package sqlitestore

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/relayserver"
)

// Reads on a pool of one read connection, and more concurrent first reads than the pool has
// connections, all finish: a read that holds a connection never waits for a second one (as
// preparing a statement for the pool would, or looking up a key the caches lack), so no read
// waits for another forever. Both pull paths, each on a store opened afresh (cold key caches).
func TestReadsNeverWaitForASecondConnection(t *testing.T) {
	for _, readers := range []int{1, 2} {
		for _, path := range []string{"Pull", "PullWires"} {
			t.Run(fmt.Sprintf("readers=%d/%s", readers, path), func(t *testing.T) {
				dir := t.TempDir()
				opts := &Options{LockWait: 200 * time.Millisecond, Readers: readers}
				s, err := Open(ctx, dir, opts)
				if err != nil {
					t.Fatal(err)
				}
				tgt := key(1)
				for i := range 3 {
					insert(t, s, item(tgt, key(2+i), fmt.Sprintf("i%d", i), "wire", 1000))
				}
				s.Close()
				if s, err = Open(ctx, dir, opts); err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				pull := s.Pull
				if path == "PullWires" {
					pull = func(ctx context.Context, tgt string, after int64, limit int, max int64) (relayserver.Page, error) {
						return s.PullWires(ctx, tgt, after, limit, max, nil)
					}
				}
				// Generous: a deadlock waits forever, a healthy read takes milliseconds.
				rctx, cancel := context.WithTimeout(ctx, time.Minute)
				defer cancel()
				var wg sync.WaitGroup
				errs := make([]error, 4*readers)
				for i := range errs {
					wg.Go(func() {
						p, err := pull(rctx, tgt, 0, 10, 1<<20)
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
}
