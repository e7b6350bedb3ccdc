package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"testing"
	"time"

	"go.etcd.io/bbolt"

	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/quarantine"
	"github.com/agentmbx/agentmbx/relayclient"
	"github.com/agentmbx/agentmbx/relayserver"
	"github.com/agentmbx/agentmbx/relayserver/relaytest"
)

// These tests run the Receiver against the real relay on 127.0.0.1 with real clocks.

func seeded(n uint64) io.Reader { return rand.NewChaCha8([32]byte{byte(n), byte(n >> 8), 13}) }

type testHost struct {
	name string
	key  mbx.SigningKey
	enc  mbx.EncKey
	c    *relayclient.Client
}

// clientRelay is a relay client as a Receiver's Relay (the host's adapter reads the client's
// errors for the Receiver; these tests meet none of them).
type clientRelay struct{ c *relayclient.Client }

func (r clientRelay) Pull(ctx context.Context, req PullRequest) (mbx.PullResponse, error) {
	return r.c.Pull(ctx, relayclient.PullRequest(req))
}

func (r clientRelay) Ack(ctx context.Context, epoch string, through int64) (mbx.AckResponse, error) {
	return r.c.Ack(ctx, epoch, through)
}

func startRelay(t *testing.T) relayclient.Pin {
	t.Helper()
	r := relaytest.Start(t, 1, relayserver.Options{})
	return relayclient.Pin{URL: r.URL, RelayKey: r.Key.PublicKey()}
}

func makeHost(t testing.TB, pin relayclient.Pin, name string, n uint64) *testHost {
	t.Helper()
	k, e := relaytest.HostKeys(t, seeded(100+n), seeded(200+n))
	c, err := relayclient.New(pin, name, k, &relayclient.Options{Timeout: 30 * time.Second, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	return &testHost{name: name, key: k, enc: e, c: c}
}

func (h *testHost) enrol(t testing.TB) {
	t.Helper()
	if err := h.c.Enrol(context.Background(), "", ""); err != nil {
		t.Fatalf("enrol %s: %v", h.name, err)
	}
}

// send seals n envelopes from a to b and pushes them; it returns their ids in order.
func send(t testing.TB, a, b *testHost, n int, seed uint64) []string {
	t.Helper()
	ids := mbx.NewULIDs(seeded(300 + seed))
	var items []relayclient.PushItem
	var out []string
	for i := range n {
		env, err := mbx.Build(mbx.Draft{From: "alice@" + a.name, To: []string{"bob@" + b.name},
			Subject: fmt.Sprintf("message %d", i), Body: fmt.Sprintf("body %d", i)}, time.Now(), ids)
		if err != nil {
			t.Fatal(err)
		}
		_, wire, err := env.Seal(seeded(400+seed+uint64(i)), b.enc.PublicKey(), a.name, a.key)
		if err != nil {
			t.Fatal(err)
		}
		items = append(items, relayclient.PushItem{Kind: mbx.ItemKindEnvelope, ItemID: env.ID,
			Targets: []relayclient.PushTarget{{HostPubkey: b.key.PublicKey(), Wire: wire}}})
		out = append(out, env.ID)
	}
	res, err := a.c.Push(context.Background(), items)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if !r.Targets[0].Accepted() {
			t.Fatalf("push of %s: %v %v", r.ItemID, r.Targets[0].Verdict, r.Targets[0].Err)
		}
	}
	return out
}

var (
	bucketDelivered = []byte("test-delivered") // message id → plaintext body
	bucketHandled   = []byte("test-handled")   // message id → number of committed handlings
)

// hostHandler is a receiving host in miniature: it knows its paired peers, opens envelopes with
// mbx.Receive, dedups by message id, and counts every committed handling of an id.
type hostHandler struct {
	self  *testHost
	peers map[string]string // host key → host name
	// midPage, when set, is called before handling each envelope (a crash test kills there).
	midPage func(n int)
	n       int
}

func (h *hostHandler) HandleEnvelope(tx *bbolt.Tx, it Item) (Verdict, error) {
	h.n++
	if h.midPage != nil {
		h.midPage(h.n)
	}
	name, ok := h.peers[it.Sender]
	if !ok {
		return Rejected(quarantine.CauseUnpaired, "sender "+mbx.Fingerprint(it.Sender)+" is not a paired host"), nil
	}
	env, err := mbx.Receive(it.Wire, name, it.Sender, h.self.enc)
	switch {
	case errors.Is(err, mbx.ErrUndecryptable):
		return Rejected(quarantine.CauseUndecryptable, err.Error()), nil
	case err != nil:
		return Rejected(quarantine.CauseBadSignature, err.Error()), nil
	case env.ID != it.ItemID:
		return Rejected(quarantine.CauseMalformed, "item id is not the envelope id"), nil
	}
	hb, err := tx.CreateBucketIfNotExists(bucketHandled)
	if err != nil {
		return Verdict{}, err
	}
	count := 0
	if v := hb.Get([]byte(env.ID)); v != nil {
		fmt.Sscan(string(v), &count)
	}
	if err := hb.Put([]byte(env.ID), []byte(fmt.Sprint(count+1))); err != nil {
		return Verdict{}, err
	}
	db, err := tx.CreateBucketIfNotExists(bucketDelivered)
	if err != nil {
		return Verdict{}, err
	}
	if db.Get([]byte(env.ID)) != nil {
		return Duplicate(), nil
	}
	return Accepted(), db.Put([]byte(env.ID), []byte(env.Body))
}

func (h *hostHandler) HandleReceipt(*bbolt.Tx, Item) (Verdict, error) {
	return Rejected(quarantine.CauseRefused, "no receipts expected in this test"), nil
}

func (h *hostHandler) HandleExpired(*bbolt.Tx, Item) (Verdict, error) {
	return Rejected(quarantine.CauseRefused, "no notices expected in this test"), nil
}

func readCounts(t testing.TB, db *bbolt.DB) (handled map[string]int, delivered map[string]string) {
	t.Helper()
	handled, delivered = map[string]int{}, map[string]string{}
	err := db.View(func(tx *bbolt.Tx) error {
		if b := tx.Bucket(bucketHandled); b != nil {
			_ = b.ForEach(func(k, v []byte) error {
				n := 0
				fmt.Sscan(string(v), &n)
				handled[string(k)] = n
				return nil
			})
		}
		if b := tx.Bucket(bucketDelivered); b != nil {
			_ = b.ForEach(func(k, v []byte) error { delivered[string(k)] = string(v); return nil })
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return handled, delivered
}

func TestReceiverAgainstRealRelay(t *testing.T) {
	pin := startRelay(t)
	alpha, beta, gamma := makeHost(t, pin, "alpha", 1), makeHost(t, pin, "beta", 2), makeHost(t, pin, "gamma", 3)
	for _, h := range []*testHost{alpha, beta, gamma} {
		h.enrol(t)
	}
	fromAlpha := send(t, alpha, beta, 7, 10)
	fromGamma := send(t, gamma, beta, 2, 20) // gamma is not paired with beta (yet)

	s := openStore(t, "")
	h := &hostHandler{self: beta, peers: map[string]string{alpha.key.PublicKey(): "alpha"}}
	r, err := s.NewReceiver(pin.URL, clientRelay{beta.c}, h, &ReceiverOptions{Limit: 4, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := 0; ; i++ {
		st, err := r.Step(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !st.More {
			break
		}
		if i > 10 {
			t.Fatal("the relay never ran out of items")
		}
	}
	handled, delivered := readCounts(t, s.DB())
	for i, id := range fromAlpha {
		if handled[id] != 1 || delivered[id] != fmt.Sprintf("body %d", i) {
			t.Fatalf("%s: handled %d times, body %q", id, handled[id], delivered[id])
		}
	}
	waiting, err := s.Quarantine().List(ctx, quarantine.Filter{Cause: quarantine.CauseUnpaired})
	if err != nil || len(waiting) != 2 || waiting[0].ItemID != fromGamma[0] || waiting[1].ItemID != fromGamma[1] {
		t.Fatalf("quarantine %+v, %v; want gamma's two envelopes waiting for pairing", waiting, err)
	}
	// Everything is acked: the relay's queue for beta is empty and acked through our position.
	info, err := beta.c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pos, _ := s.Position(ctx, pin.URL)
	if info.You.AckedThrough != pos.ReceivedThrough || info.You.HeadSeq != pos.ReceivedThrough || pos.Epoch != info.Epoch {
		t.Fatalf("relay you %+v, position %+v; want acked through the position", info.You, pos)
	}
	page, err := beta.c.Pull(ctx, relayclient.PullRequest{Epoch: info.Epoch})
	if err != nil || len(page.Items) != 0 {
		t.Fatalf("relay still holds %d items (%v)", len(page.Items), err)
	}

	// beta pairs with gamma: release its waiting items and process them in one transaction.
	h.peers[gamma.key.PublicKey()] = "gamma"
	err = s.DB().Update(func(tx *bbolt.Tx) error {
		released, err := s.Quarantine().In(tx).Release(gamma.key.PublicKey())
		if err != nil {
			return err
		}
		for _, e := range released {
			v, err := h.HandleEnvelope(tx, Item{Relay: e.Relay, Epoch: e.Epoch, Seq: e.Seq, Kind: e.Kind, ItemID: e.ItemID, Sender: e.Sender, Wire: e.Wire})
			if err != nil {
				return err
			}
			if v.Outcome == OutcomeRejected {
				t.Errorf("released %s still rejected: %s", e.ItemID, v.Reason)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	handled, _ = readCounts(t, s.DB())
	for _, id := range fromGamma {
		if handled[id] != 1 {
			t.Fatalf("gamma's %s handled %d times after pairing, want 1", id, handled[id])
		}
	}
	if n, _ := s.Quarantine().List(ctx, quarantine.Filter{}); len(n) != 0 {
		t.Fatalf("quarantine still holds %d entries", len(n))
	}
}
