package v1only_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/relayclient"
	"github.com/agentmbx/agentmbx/relayserver/relaytest/v1only"
)

var bg = context.Background()

type peer struct {
	name string
	key  mbx.SigningKey
	enc  mbx.EncKey
	c    *relayclient.V1
}

func newPeer(t *testing.T, url, name string) peer {
	t.Helper()
	k, err := mbx.GenerateSigningKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	e, err := mbx.GenerateEncKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	c, err := relayclient.NewV1(url, name, k, &relayclient.Options{Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return peer{name: name, key: k, enc: e, c: c}
}

// sealed is a sealed envelope from p to agent@to, sealed for enc.
func sealed(t *testing.T, p peer, to string, enc string) json.RawMessage {
	t.Helper()
	env, err := mbx.Build(mbx.Draft{From: "ann@" + p.name, To: []string{"bob@" + to}, Subject: "hi", Body: "through a v1 relay"}, time.Now(), mbx.NewULIDs(rand.Reader))
	if err != nil {
		t.Fatal(err)
	}
	_, wire, err := env.Seal(rand.Reader, enc, p.name, p.key)
	if err != nil {
		t.Fatal(err)
	}
	return wire
}

// TestV1ClientAgainstV1OnlyRelay: our v1 client negotiates v1 with it, enrols, publishes its ad,
// pushes, pulls and acks; a restart of the relay forgets the enrolment (401) and the mail.
func TestV1ClientAgainstV1OnlyRelay(t *testing.T) {
	r := v1only.New(v1only.Options{})
	ts := httptest.NewServer(r)
	defer ts.Close()

	proto, _, err := relayclient.Negotiate(bg, ts.URL, nil)
	if err != nil || proto != relayclient.ProtocolV1 {
		t.Fatalf("Negotiate = %v, %v; want v1", proto, err)
	}
	a, b := newPeer(t, ts.URL, "alpha"), newPeer(t, ts.URL, "beta")
	for _, p := range []peer{a, b} {
		if err := p.c.Enrol(bg, ""); err != nil {
			t.Fatalf("%s: enrol: %v", p.name, err)
		}
		if err := p.c.PublishEncAd(bg, p.enc.PublicKey()); err != nil {
			t.Fatalf("%s: enc-key ad: %v", p.name, err)
		}
		if r.EncAd(p.key.PublicKey()) != p.enc.PublicKey() {
			t.Fatalf("%s: ad not held", p.name)
		}
	}

	w1, w2 := sealed(t, a, "beta", b.enc.PublicKey()), sealed(t, a, "beta", b.enc.PublicKey())
	res, err := a.c.Push(bg, []json.RawMessage{w1, w2, w1})
	if err != nil || res.Stored != 3 || res.Error != "" {
		t.Fatalf("push = %+v, %v; want 3 stored (the repeat counts)", res, err)
	}
	if q := r.Queued(b.key.PublicKey()); len(q) != 2 {
		t.Fatalf("queued %d, want 2 (a repeated id is not queued again)", len(q))
	}
	bad := sealed(t, a, "gamma", b.enc.PublicKey())
	res, err = a.c.Push(bg, []json.RawMessage{bad})
	var se *relayclient.StatusError
	if !errors.As(err, &se) || se.Status != 413 {
		t.Fatalf("push to an unknown host = %+v, %v; want 413", res, err)
	}

	page, err := b.c.Pull(bg, 0)
	if err != nil || len(page.Items) != 2 || page.Cursor != 2 || page.Items[0].From != "alpha" {
		t.Fatalf("pull = %+v, %v", page, err)
	}
	if err := b.c.Ack(bg, page.Cursor); err != nil {
		t.Fatal(err)
	}
	if page, err := b.c.Pull(bg, page.Cursor); err != nil || len(page.Items) != 0 {
		t.Fatalf("pull after ack = %+v, %v", page, err)
	}

	r.Restart()
	if _, err := b.c.Pull(bg, 2); !errors.Is(err, relayclient.ErrNotEnrolled) {
		t.Fatalf("pull after a restart: %v, want ErrNotEnrolled (401)", err)
	}
	if err := b.c.Enrol(bg, ""); err != nil {
		t.Fatal(err)
	}
	if page, err := b.c.Pull(bg, 2); err != nil || !page.Rewound {
		t.Fatalf("pull after the restart = %+v, %v; want a rewound cursor", page, err)
	}
}
