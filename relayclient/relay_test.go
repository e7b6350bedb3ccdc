package relayclient_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/relayclient"
	"github.com/agentmbx/agentmbx/relayserver"
	"github.com/agentmbx/agentmbx/relayserver/relaytest"
	"github.com/agentmbx/agentmbx/relayserver/sqlitestore"
)

// These tests run the client against the real relay (relayserver over its SQLite store) on
// 127.0.0.1, with real clocks on both sides.

var bg = context.Background()

func seeded(n uint64) io.Reader { return rand.NewChaCha8([32]byte{byte(n), byte(n >> 8), 11}) }

type host struct {
	name string
	key  mbx.SigningKey
	enc  mbx.EncKey
	c    *relayclient.Client
}

type realRelay struct {
	key   mbx.SigningKey
	url   string
	store *sqlitestore.Store
	srv   *relayserver.Server
}

func startRelay(t *testing.T) *realRelay {
	t.Helper()
	r := relaytest.Start(t, 1, relayserver.Options{})
	return &realRelay{key: r.Key, url: r.URL, store: r.Store, srv: r.Server}
}

func newHost(t *testing.T, r *realRelay, pin relayclient.Pin, name string, n uint64) *host {
	t.Helper()
	k, e := relaytest.HostKeys(t, seeded(100+n), seeded(200+n))
	c, err := relayclient.New(pin, name, k, &relayclient.Options{Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return &host{name: name, key: k, enc: e, c: c}
}

// sealed builds an envelope from a to b's agent and seals it for b: the item id and wire bytes.
func sealed(t *testing.T, a, b *host, n uint64) (string, []byte) {
	t.Helper()
	id, wire, _ := sealedTwice(t, a, b, n)
	return id, wire
}

// sealedTwice also returns a second sealing of the same envelope (new ciphertext, same id).
func sealedTwice(t *testing.T, a, b *host, n uint64) (string, []byte, []byte) {
	t.Helper()
	env, err := mbx.Build(mbx.Draft{From: "alice@" + a.name, To: []string{"bob@" + b.name}, Subject: "hello", Body: "hi there"},
		time.Now(), mbx.NewULIDs(seeded(300+n)))
	if err != nil {
		t.Fatal(err)
	}
	_, wire, err := env.Seal(seeded(400+n), b.enc.PublicKey(), a.name, a.key)
	if err != nil {
		t.Fatal(err)
	}
	_, wire2, err := env.Seal(seeded(600+n), b.enc.PublicKey(), a.name, a.key)
	if err != nil {
		t.Fatal(err)
	}
	return env.ID, wire, wire2
}

func TestAgainstRealRelay(t *testing.T) {
	r := startRelay(t)

	// Discover and pin (with the fingerprint, as `relay set --key` does).
	info, err := relayclient.Discover(bg, r.url, nil)
	if err != nil {
		t.Fatal(err)
	}
	pin, err := relayclient.PinInfo(r.url, info, r.key.Fingerprint())
	if err != nil {
		t.Fatal(err)
	}
	alpha, beta, gamma := newHost(t, r, pin, "alpha", 1), newHost(t, r, pin, "beta", 2), newHost(t, r, pin, "gamma", 3)

	// Not enrolled yet: info has no you block, and a pull is refused as not enrolled.
	if info, err := alpha.c.Info(bg); err != nil || info.You != nil {
		t.Fatalf("info before enrolment: %+v, %v; want no you block", info.You, err)
	}
	if _, err := alpha.c.Pull(bg, relayclient.PullRequest{}); !errors.Is(err, relayclient.ErrNotEnrolled) {
		t.Fatalf("pull before enrolment: err = %v, want ErrNotEnrolled", err)
	}
	for _, h := range []*host{alpha, beta, gamma} {
		if err := h.c.Enrol(bg, "", ""); err != nil {
			t.Fatalf("enrol %s: %v", h.name, err)
		}
		if err := h.c.Enrol(bg, "", ""); err != nil {
			t.Fatalf("enrol %s again: %v", h.name, err)
		}
		if _, err := h.c.PublishEncAd(bg, h.enc.PublicKey(), 0); err != nil {
			t.Fatalf("publish enc-key ad of %s: %v", h.name, err)
		}
	}
	if info, err := beta.c.Info(bg); err != nil || info.You == nil || info.You.Pubkey != beta.key.PublicKey() {
		t.Fatalf("info after enrolment: %+v, %v", info.You, err)
	}

	// alpha finds beta's enc key through the relay, with every check applied.
	encPub, ad, err := alpha.c.FetchEncAd(bg, mbx.EncAdPeer{Host: "beta", HostPubkey: beta.key.PublicKey()}, nil)
	if err != nil || encPub != beta.enc.PublicKey() || ad.HostPubkey != beta.key.PublicKey() {
		t.Fatalf("fetch beta's enc key: %q, %v", encPub, err)
	}
	// The relay's ad for beta is not an ad for gamma.
	if _, _, err := alpha.c.FetchEncAd(bg, mbx.EncAdPeer{Host: "gamma", HostPubkey: beta.key.PublicKey()}, nil); !errors.Is(err, mbx.ErrEncAdWrongPeer) {
		t.Fatalf("beta's ad under gamma's name: err = %v, want wrong peer", err)
	}

	// beta accepts only alpha.
	if _, err := beta.c.PublishSenders(bg, []string{alpha.key.PublicKey()}); err != nil {
		t.Fatal(err)
	}

	id1, wire1, resealed1 := sealedTwice(t, alpha, beta, 1)
	id2, wire2 := sealed(t, alpha, beta, 2)
	push := func(c *relayclient.Client, id string, wire []byte) relayclient.TargetResult {
		t.Helper()
		res, err := c.Push(bg, []relayclient.PushItem{{Kind: mbx.ItemKindEnvelope, ItemID: id,
			Targets: []relayclient.PushTarget{{HostPubkey: beta.key.PublicKey(), Wire: wire}}}})
		if err != nil {
			t.Fatalf("push %s: %v", id, err)
		}
		return res[0].Targets[0]
	}
	first := push(alpha.c, id1, wire1)
	if first.Verdict != relayclient.VerdictAccepted || first.Epoch != info.Epoch || first.Seq <= 0 {
		t.Fatalf("first push: %v (%v) seq %d epoch %q", first.Verdict, first.Err, first.Seq, first.Epoch)
	}
	// A retry after a lost answer is a duplicate with the same seq and acceptance time.
	again := push(alpha.c, id1, wire1)
	if again.Verdict != relayclient.VerdictDuplicate || again.Seq != first.Seq || !again.At.Equal(first.At) {
		t.Fatalf("retry: %v seq %d at %v; want duplicate, seq %d, at %v", again.Verdict, again.Seq, again.At, first.Seq, first.At)
	}
	// The same id with other bytes (a re-seal) is a conflict.
	if res := push(alpha.c, id1, resealed1); res.Verdict != relayclient.VerdictRejected || res.Code != "conflict" {
		t.Fatalf("re-sealed retry: %v %q, want rejected:conflict", res.Verdict, res.Code)
	}
	// gamma is not on beta's allowlist.
	idG, wireG := sealed(t, gamma, beta, 3)
	if res := push(gamma.c, idG, wireG); res.Verdict != relayclient.VerdictRejected || res.Accepted() {
		t.Fatalf("stranger's push: %v %q, want rejected", res.Verdict, res.Code)
	}
	second := push(alpha.c, id2, wire2)
	if !second.Accepted() || second.Seq <= first.Seq {
		t.Fatalf("second push: %v seq %d", second.Verdict, second.Seq)
	}

	// beta pulls exactly the bytes alpha pushed, in seq order, with a page limit.
	page, err := beta.c.Pull(bg, relayclient.PullRequest{After: 0, Limit: 1, Epoch: info.Epoch})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Items) != 1 || !page.More || page.Items[0].ItemID != id1 || page.Items[0].Seq != first.Seq || page.HeadSeq != second.Seq {
		t.Fatalf("page 1: %+v", page)
	}
	if got, _ := mbx.DecodeB64Lenient(page.Items[0].WireB64); string(got) != string(wire1) {
		t.Fatal("pulled wire bytes differ from the pushed ones")
	}
	page, err = beta.c.Pull(bg, relayclient.PullRequest{After: page.LastSeq, Epoch: info.Epoch})
	if err != nil || len(page.Items) != 1 || page.Items[0].ItemID != id2 || page.More {
		t.Fatalf("page 2: %+v, %v", page, err)
	}

	// A stale epoch is a 409 with the current one.
	_, err = beta.c.Pull(bg, relayclient.PullRequest{After: 0, Epoch: "some-old-epoch"})
	var ee *relayclient.EpochError
	if !errors.As(err, &ee) || ee.Epoch != info.Epoch {
		t.Fatalf("stale epoch pull: err = %v, want an EpochError naming %s", err, info.Epoch)
	}
	if _, err := beta.c.Ack(bg, "some-old-epoch", 1); !errors.Is(err, relayclient.ErrEpochChanged) {
		t.Fatalf("stale epoch ack: err = %v, want ErrEpochChanged", err)
	}

	// Ack the first item; an ack beyond the head is BAD_ACK.
	ack, err := beta.c.Ack(bg, info.Epoch, first.Seq)
	if err != nil || ack.AckedThrough != first.Seq || ack.Deleted != 1 {
		t.Fatalf("ack: %+v, %v", ack, err)
	}
	if _, err := beta.c.Ack(bg, info.Epoch, second.Seq+1_000_000); !errors.Is(err, relayclient.ErrRewound) {
		t.Fatalf("ack beyond the head: err = %v, want ErrRewound", err)
	}
	page, err = beta.c.Pull(bg, relayclient.PullRequest{After: 0, Epoch: info.Epoch})
	if err != nil || len(page.Items) != 1 || page.Items[0].ItemID != id2 {
		t.Fatalf("after the ack the queue holds only the second item: %+v, %v", page, err)
	}

	// A pin naming another relay key: the first info stops the client.
	other, _ := mbx.GenerateSigningKey(seeded(999))
	quiet := &relayclient.Options{Logger: slog.New(slog.DiscardHandler)}
	wrong, err := relayclient.New(relayclient.Pin{URL: pin.URL, RelayKey: other.PublicKey()}, "beta", beta.key, quiet)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wrong.Info(bg); !errors.Is(err, relayclient.ErrRelayKeyChanged) {
		t.Fatalf("info with the wrong pin: err = %v, want ErrRelayKeyChanged", err)
	}
	// ... and its pushes' statements are never taken as accepted before that either: a fresh
	// client with the wrong pin pushing sees statements signed by the real relay key.
	wrong2, _ := relayclient.New(relayclient.Pin{URL: pin.URL, RelayKey: other.PublicKey()}, "alpha", alpha.key, quiet)
	id3, wire3 := sealed(t, alpha, beta, 4)
	if _, err := wrong2.Push(bg, []relayclient.PushItem{{Kind: mbx.ItemKindEnvelope, ItemID: id3,
		Targets: []relayclient.PushTarget{{HostPubkey: beta.key.PublicKey(), Wire: wire3}}}}); !errors.Is(err, relayclient.ErrRelayKeyChanged) {
		t.Fatalf("push with the wrong pin: err = %v, want ErrRelayKeyChanged", err)
	}

	// Rotation: beta moves to a new key; the relay moves its queue.
	next, _ := mbx.GenerateSigningKey(seeded(500))
	rot, err := mbx.SignRotation("beta", beta.key, next, beta.enc.PublicKey(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	moved, err := beta.c.Rotate(bg, rot)
	// The queue held id2 and id3 (the relay stored the wrong pin's push; only its client did not
	// take the statement as accepted).
	if err != nil || moved.Moved != 2 {
		t.Fatalf("rotate: %+v, %v; want 2 items moved", moved, err)
	}
	rotated, _ := relayclient.New(pin, "beta", next, nil)
	page, err = rotated.Pull(bg, relayclient.PullRequest{After: 0, Epoch: info.Epoch})
	if err != nil || len(page.Items) != 2 || page.Items[0].ItemID != id2 || page.Items[1].ItemID != id3 {
		t.Fatalf("pull with the new key: %+v, %v", page, err)
	}
	if _, err := beta.c.Pull(bg, relayclient.PullRequest{}); !errors.Is(err, relayclient.ErrForbidden) {
		t.Fatalf("pull with the old key: err = %v, want ErrForbidden (revoked)", err)
	}
}
