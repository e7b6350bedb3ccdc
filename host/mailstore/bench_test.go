package mailstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"go.etcd.io/bbolt"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/mbx"
)

// BenchmarkMailbox100k measures search, thread and inbox pages over a generated mailbox of
// 100,000 messages (built once, outside the timings; about a minute on a 2-core machine). Every
// message goes to bob; one in a hundred to carol too. Bodies are 30 words drawn from a
// 2,000-word vocabulary with a Zipf distribution, so w0 is in most messages; "north" is in the
// even messages and "south" in the odd ones (a query of both is the worst case: two long lists
// with nothing in common); "zebra" is in ten. Threads are runs of ten messages.
func BenchmarkMailbox100k(b *testing.B) {
	const n = 100_000
	h := newTestStore(b, false)
	start := time.Now()
	ids := fillMailbox(b, h, n)
	var size int64
	h.db.View(func(tx *bbolt.Tx) error { size = tx.Size(); return nil })
	b.Logf("generated %d messages in %s; state.db %d MiB", n, time.Since(start).Round(time.Millisecond), size>>20)
	ctx := context.Background()

	for _, c := range []struct{ name, agent, query string }{
		{"search/rare-word", "bob", "zebra"},
		{"search/common-word", "bob", "w0"},
		{"search/two-common-words", "bob", "w0 w1"},
		{"search/common-word-few-mine", "carol", "w0"},
		{"search/disjoint-words-worst", "bob", "north south"},
		{"search/host-wide", "", "w0 w2"},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := h.Search(ctx, api.SearchRequest{Agent: c.agent, Query: c.query}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("thread", func(b *testing.B) {
		i := 0
		for b.Loop() {
			t, err := h.Thread(ctx, api.ThreadRequest{Agent: "bob", ID: ids[i%n]})
			if err != nil || len(t.Messages) != 10 {
				b.Fatalf("thread: %d messages, %v", len(t.Messages), err)
			}
			i += 7919
		}
	})
	b.Run("inbox-page-all", func(b *testing.B) {
		for b.Loop() {
			p, err := h.InboxPage(ctx, api.InboxRequest{Agent: "bob", All: true})
			if err != nil || p.More != n-api.DefaultPage {
				b.Fatalf("page: more %d, %v", p.More, err)
			}
		}
	})
}

// fillMailbox delivers n generated messages from alice to bob (and every hundredth to carol),
// 2,000 to a transaction, and returns their ids in order.
func fillMailbox(b *testing.B, h *testStore, n int) []string {
	clock := h.clock
	zipf := rand.NewZipf(rand.New(rand.NewPCG(8, 8)), 1.1, 1, 1999)
	words := func(k int) string {
		var sb strings.Builder
		for j := range k {
			if j > 0 {
				sb.WriteByte(' ')
			}
			fmt.Fprintf(&sb, "w%d", zipf.Uint64())
		}
		return sb.String()
	}
	ids := make([]string, 0, n)
	const perTx = 2000
	for done := 0; done < n; done += perTx {
		err := h.db.Update(func(tx *bbolt.Tx) error {
			for i := done; i < done+perTx && i < n; i++ {
				clock.Advance(time.Millisecond)
				id := h.ulids.New(clock.Now())
				body := words(30)
				if i%2 == 0 {
					body += " north"
				} else {
					body += " south"
				}
				if i%(n/10) == 0 {
					body += " zebra"
				}
				thread := id
				if i%10 != 0 {
					thread = ids[i-i%10]
				}
				to := []string{"bob"}
				if i%100 == 0 {
					to = append(to, "carol")
				}
				m := Message{ID: id, TS: mbx.ISOTime(clock.Now()), From: "alice@alpha", To: to,
					Subject: words(4), Body: body, Kind: "message", Thread: thread}
				if err := h.DeliverTx(tx, &m, to, clock.Now()); err != nil {
					return err
				}
				ids = append(ids, id)
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	return ids
}
