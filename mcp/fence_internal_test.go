package mcp

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/agentmbx/agentmbx/api"
)

// A response whose text holds the drawn nonce anywhere but in its fence lines is rendered
// again with another; one that always does is refused rather than sent with a forgeable fence.
func TestFenceNonceRedrawn(t *testing.T) {
	var drawn []string
	text, nonce, err := fenced(func(n string) (string, int) {
		drawn = append(drawn, n)
		body := "hello"
		if len(drawn) == 1 {
			body = "a body that holds " + n // as if it had guessed the first draw
		}
		return fenceOpen(n, "bob@beta", Sender{Via: api.ViaLAN, Verified: true}) + "\n" + body + "\n" + fenceClose(n), 1
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(drawn) != 2 || nonce != drawn[1] || nonce == drawn[0] || strings.Contains(text, drawn[0]) {
		t.Errorf("draws %q, kept %q: want the second", drawn, nonce)
	}
	if !strings.Contains(text, "host key unknown, via LAN, signature verified>>") {
		t.Errorf("fence line %q", text)
	}
	_, _, err = fenced(func(n string) (string, int) { return n + n + n, 1 })
	if !errors.Is(err, errNoNonce) {
		t.Errorf("always-colliding render: %v, want errNoNonce", err)
	}
}

// senderHost answers Status and Peers; the rest of Host is not used.
type senderHost struct {
	Host
	calls int
}

func (s *senderHost) Status(context.Context) (api.Status, error) {
	s.calls++
	return api.Status{Host: "alpha", Fingerprint: "aaaa-aaaa-aaaa-aaaa"}, nil
}

func (s *senderHost) Peers(context.Context) ([]api.Peer, error) {
	s.calls++
	return []api.Peer{{Host: "beta", Fingerprint: "bbbb-bbbb-bbbb-bbbb"}}, nil
}

// The sender of a message is what the host recorded on arrival; mail stored before that was
// recorded gets its origin's pinned key (or this host's), looked up once per response.
func TestSendersOfRecordedAndUnrecordedMail(t *testing.T) {
	h := &senderHost{}
	ss := &senders{h: h}
	ctx := context.Background()
	for _, c := range []struct {
		m    api.Message
		want Sender
	}{
		{api.Message{Origin: "beta", Via: api.ViaRelay, Fingerprint: "cccc-cccc-cccc-cccc"}, Sender{"cccc-cccc-cccc-cccc", api.ViaRelay, true}},
		{api.Message{Via: api.ViaLocal, Fingerprint: "aaaa-aaaa-aaaa-aaaa"}, Sender{"aaaa-aaaa-aaaa-aaaa", api.ViaLocal, false}},
		{api.Message{Origin: "beta"}, Sender{"bbbb-bbbb-bbbb-bbbb", viaUnrecorded, true}},
		{api.Message{Origin: "gone"}, Sender{"", viaUnrecorded, true}},
		{api.Message{}, Sender{"aaaa-aaaa-aaaa-aaaa", api.ViaLocal, false}},
	} {
		if got := ss.of(ctx, c.m); got != c.want {
			t.Errorf("sender of %+v = %+v, want %+v", c.m, got, c.want)
		}
	}
	if h.calls != 2 {
		t.Errorf("%d lookups, want Status and Peers once", h.calls)
	}
	if s := fenceOpen("n", "ann@gone", Sender{Via: viaUnrecorded, Verified: true}); s != "<<untrusted mail n: from ann@gone, host key unknown, via LAN or relay (not recorded), signature verified>>" {
		t.Errorf("fence line %q", s)
	}
}
