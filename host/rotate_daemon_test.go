package host

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/client"
)

// TestRotateKeysWhileDaemonsRun: alpha and beta run as daemons paired over the LAN and send to
// each other without pause over their control sockets; once both have sent some, alpha rotates
// its keys through its socket (RotateKeys), the senders going on meanwhile. When RotateKeys
// answers, alpha's status shows the new key; every message, before, during and after the
// rotation, arrives exactly once each way; beta pins alpha's new key with the old one retired.
func TestRotateKeysWhileDaemonsRun(t *testing.T) {
	a, b := startDaemon(t, "alpha"), startDaemon(t, "beta")
	if err := a.h.PinPeer(b.record(t)); err != nil {
		t.Fatal(err)
	}
	if err := b.h.PinPeer(a.record(t)); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ca, cb := dialDaemon(t, a.home), dialDaemon(t, b.home)
	before, err := ca.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}

	const each = 40
	type sent struct {
		mu  sync.Mutex
		ids []string
	}
	var toBob, toAlice sent
	started := make(chan struct{}, 2) // each sender says when it has sent 5
	var wg sync.WaitGroup
	send := func(c *client.Client, from, to string, out *sent) {
		defer wg.Done()
		for i := range each {
			res, err := c.Send(ctx, api.SendRequest{From: from, To: []string{to}, Subject: fmt.Sprintf("%d", i), Body: "while alpha rotates"})
			if err != nil {
				t.Errorf("%s → %s, message %d: %v", from, to, i, err)
				return
			}
			out.mu.Lock()
			out.ids = append(out.ids, res.ID)
			out.mu.Unlock()
			if i == 4 {
				started <- struct{}{}
			}
		}
	}
	wg.Add(2)
	go send(ca, "alice", "bob@beta", &toBob)
	go send(cb, "bob", "alice@alpha", &toAlice)
	<-started
	<-started

	rot, err := ca.RotateKeys(ctx)
	if err != nil {
		t.Fatalf("RotateKeys: %v", err)
	}
	if rot.OldFingerprint != before.Fingerprint || rot.NewFingerprint == before.Fingerprint {
		t.Fatalf("rotation %+v, alpha was %s", rot, before.Fingerprint)
	}
	after, err := ca.Status(ctx)
	if err != nil || after.Fingerprint != rot.NewFingerprint || !after.Daemon {
		t.Fatalf("status once RotateKeys answered = %+v, %v; want the new key %s", after, err, rot.NewFingerprint)
	}
	wg.Wait()
	if t.Failed() {
		return
	}

	// Every message arrives once each way.
	for _, w := range []struct {
		c     *client.Client
		agent string
		ids   []string
	}{{cb, "bob", toBob.ids}, {ca, "alice", toAlice.ids}} {
		waitUntil(t, fmt.Sprintf("%d messages for %s", len(w.ids), w.agent), func() (bool, string) {
			msgs, err := w.c.Inbox(ctx, w.agent, true)
			if err != nil {
				t.Fatal(err)
			}
			seen := map[string]int{}
			for _, m := range msgs {
				seen[m.ID]++
				if seen[m.ID] > 1 || m.Deliveries > 1 {
					t.Fatalf("%s holds %s more than once", w.agent, m.ID)
				}
			}
			missing := slices.DeleteFunc(slices.Clone(w.ids), func(id string) bool { return seen[id] == 1 })
			return len(missing) == 0 && len(msgs) == len(w.ids), fmt.Sprintf("%d of %d, %d in the mailbox", len(w.ids)-len(missing), len(w.ids), len(msgs))
		})
	}
	// The rotation finishes (beta takes it over the LAN), and beta pins the new key.
	waitUntil(t, "the rotation done", func() (bool, string) {
		st, err := ca.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return st.Rotation != nil && st.Rotation.Done != "", fmt.Sprintf("%+v", st.Rotation)
	})
	peers, err := cb.Peers(ctx)
	if err != nil || len(peers) != 1 || peers[0].Fingerprint != rot.NewFingerprint ||
		!slices.Contains(peers[0].RetiredFingerprints, before.Fingerprint) {
		t.Fatalf("beta's peers after the rotation = %+v, %v", peers, err)
	}
	// Nothing left to send on either side.
	for _, c := range []*client.Client{ca, cb} {
		waitUntil(t, "outbox settled", func() (bool, string) {
			rows, err := c.Outbox(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rows {
				if r.State != "done" {
					return false, fmt.Sprintf("%+v", r)
				}
			}
			return true, ""
		})
	}
}

// waitUntil polls cond until it holds, failing after a minute with its last words.
func waitUntil(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		ok, why := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: %s", what, why)
		}
		time.Sleep(20 * time.Millisecond) // polls over the socket: the daemons work on their own
	}
}
