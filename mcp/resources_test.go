package mcp_test

import (
	"context"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentmbx/agentmbx/mcp"
)

// subscriber is an SDK client for an agent, speaking protocol version proto ("" for the SDK's
// latest), whose resource updates arrive on updates.
type subscriber struct {
	t       *testing.T
	cs      *sdk.ClientSession
	updates chan string
	acks    chan struct{} // subscriptions/acknowledged (protocol 2026-07-28 and later)
	legacy  bool          // resources/subscribe answers, so its errors are seen
}

func newSubscriber(t *testing.T, agent, proto string, connect mcp.Connect) *subscriber {
	t.Helper()
	srv, err := mcp.NewServer(mcp.Options{Agent: agent, Connect: connect, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	s := &subscriber{t: t, updates: make(chan string, 64), acks: make(chan struct{}, 64), legacy: proto != "" && proto < "2026"}
	st, ct := sdk.NewInMemoryTransports()
	ctx := testCtx(t)
	ss, err := srv.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, &sdk.ClientOptions{
		ResourceUpdatedHandler: func(_ context.Context, r *sdk.ResourceUpdatedNotificationRequest) {
			s.updates <- r.Params.URI
		}})
	c.AddReceivingMiddleware(func(next sdk.MethodHandler) sdk.MethodHandler {
		return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
			if method == "notifications/subscriptions/acknowledged" {
				s.acks <- struct{}{}
			}
			return next(ctx, method, req)
		}
	})
	s.cs, err = c.Connect(ctx, ct, &sdk.ClientSessionOptions{ProtocolVersion: proto})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.cs.Close(); ss.Wait() })
	return s
}

// subscribe subscribes to uri and returns once the server has the subscription in place: its
// answer (legacy protocols) or its acknowledgement.
func (s *subscriber) subscribe(uri string) {
	s.t.Helper()
	if err := s.cs.Subscribe(testCtx(s.t), &sdk.SubscribeParams{URI: uri}); err != nil {
		s.t.Fatalf("subscribe %s: %v", uri, err)
	}
	if s.legacy {
		return
	}
	select {
	case <-s.acks:
	case <-time.After(time.Minute):
		s.t.Fatalf("subscribe %s: no acknowledgement", uri)
	}
}

// next waits for the next resource update.
func next(t *testing.T, updates <-chan string) string {
	t.Helper()
	select {
	case uri := <-updates:
		return uri
	case <-time.After(time.Minute):
		t.Fatal("no resource update")
		return ""
	}
}

func readResource(t *testing.T, cs *sdk.ClientSession, uri string) string {
	t.Helper()
	res, err := cs.ReadResource(testCtx(t), &sdk.ReadResourceParams{URI: uri})
	if err != nil {
		t.Fatalf("read %s: %v", uri, err)
	}
	if len(res.Contents) != 1 || res.Contents[0].MIMEType != "text/plain" {
		t.Fatalf("read %s: contents %+v", uri, res.Contents)
	}
	return res.Contents[0].Text
}

func TestResourcesAndSubscriptions(t *testing.T) {
	for _, proto := range []string{"2025-06-18", ""} {
		name := proto
		if name == "" {
			name = "latest"
		}
		t.Run(name, func(t *testing.T) { testResources(t, proto) })
	}
}

func testResources(t *testing.T, proto string) {
	h, home := newHost(t, "alpha")
	serveSocket(t, h, home)
	sub := newSubscriber(t, "bob", proto, mcp.DaemonOnly(home))
	bob, updates := sub.cs, sub.updates
	alice := session(t, "alice", mcp.DaemonOnly(home))
	ok[mcp.WhoAmI](t, bob, "mbx_whoami", nil) // registers bob

	init := bob.InitializeResult()
	if c := init.Capabilities.Resources; c == nil || !c.Subscribe {
		t.Fatalf("resources capability %+v, want subscribe", c)
	}
	rl, err := bob.ListResources(testCtx(t), nil)
	if err != nil || len(rl.Resources) != 1 || rl.Resources[0].URI != mcp.InboxURI {
		t.Fatalf("resources/list = %+v %v", rl, err)
	}
	tl, err := bob.ListResourceTemplates(testCtx(t), nil)
	if err != nil || len(tl.ResourceTemplates) != 1 || tl.ResourceTemplates[0].URITemplate != mcp.ThreadURITemplate {
		t.Fatalf("resources/templates/list = %+v %v", tl, err)
	}
	if txt := readResource(t, bob, mcp.InboxURI); txt != "no mail unread" {
		t.Fatalf("empty inbox resource = %q", txt)
	}

	sub.subscribe(mcp.InboxURI)
	sent, _ := ok[mcp.Sent](t, alice, "mbx_send", map[string]any{"to": []string{"bob"}, "subject": "plan", "body": forged})
	if uri := next(t, updates); uri != mcp.InboxURI {
		t.Fatalf("update for %s, want the inbox", uri)
	}
	key := h.Key().Fingerprint()
	txt := readResource(t, bob, mcp.InboxURI)
	checkFences(t, "inbox resource", txt, fenceNonce(t, txt), key, "written on this host, not signed", "alice@alpha")
	// Reading the resource moves nothing: mbx_wait still lists the message as new.
	w, _ := ok[mcp.Listing](t, bob, "mbx_wait", map[string]any{"timeout_s": 0})
	if len(w.Messages) != 1 || w.Messages[0].ID != sent.ID {
		t.Fatalf("after reading the resource, mbx_wait = %+v, want %s", w, sent.ID)
	}

	// A thread, named by a message of it: mail in that thread updates it (and the inbox).
	thread := "mbx://thread/" + sent.ID
	txt = readResource(t, bob, thread)
	checkFences(t, "thread resource", txt, fenceNonce(t, txt), key, "written on this host, not signed", "alice@alpha")
	sub.subscribe(thread)
	ok[mcp.Sent](t, alice, "mbx_reply", map[string]any{"id": sent.ID, "body": "and another thing"}) // her own message: to bob
	got := map[string]bool{next(t, updates): true, next(t, updates): true}
	if !got[mcp.InboxURI] || !got[thread] {
		t.Fatalf("updates %v, want the inbox and %s", got, thread)
	}
	// Mail in another thread updates the inbox only.
	ok[mcp.Sent](t, alice, "mbx_send", map[string]any{"to": []string{"bob"}, "body": "unrelated"})
	if uri := next(t, updates); uri != mcp.InboxURI {
		t.Fatalf("update for %s, want the inbox", uri)
	}
	if !sub.legacy {
		return // unsubscribing ends a subscriptions/listen stream without an answer
	}
	// After unsubscribing, nothing; a later subscription (the event stream is dialled again)
	// hears only what comes after it.
	for _, uri := range []string{mcp.InboxURI, thread} {
		if err := bob.Unsubscribe(testCtx(t), &sdk.UnsubscribeParams{URI: uri}); err != nil {
			t.Fatal(err)
		}
	}
	ok[mcp.Sent](t, alice, "mbx_reply", map[string]any{"id": sent.ID, "body": "unheard"})
	sub.subscribe(mcp.InboxURI)
	ok[mcp.Sent](t, alice, "mbx_send", map[string]any{"to": []string{"bob"}, "body": "heard"})
	if uri := next(t, updates); uri != mcp.InboxURI {
		t.Fatalf("update for %s, want the inbox", uri)
	}
	select {
	case uri := <-updates:
		t.Fatalf("an extra update for %s (one was sent while unsubscribed?)", uri)
	default:
	}

	// Unknown resources are refused, for reading and for subscribing.
	for _, uri := range []string{"mbx://thread/01JA0000000000000000000000", "mbx://thread/", "mbx://outbox", "file:///etc/passwd"} {
		if _, err := bob.ReadResource(testCtx(t), &sdk.ReadResourceParams{URI: uri}); err == nil || !strings.Contains(err.Error(), "not found") {
			t.Errorf("read %s: %v, want not found", uri, err)
		}
		if err := bob.Subscribe(testCtx(t), &sdk.SubscribeParams{URI: uri}); err == nil {
			t.Errorf("subscribe %s succeeded", uri)
		}
	}
}

// fenceNonce is the nonce of the first fence in txt.
func fenceNonce(t *testing.T, txt string) string {
	t.Helper()
	_, rest, ok := strings.Cut(txt, "<<untrusted mail ")
	if !ok || len(rest) < 16 {
		t.Fatalf("no fence in %q", txt)
	}
	return rest[:16]
}

// A subscription made while no daemon runs is served once the daemon comes: the stream is
// dialled again, the inbox is announced (mail may have come meanwhile), and new mail is heard.
func TestSubscriptionWaitsForTheDaemon(t *testing.T) {
	h, home := newHost(t, "alpha")
	sub := newSubscriber(t, "bob", "2025-06-18", mcp.DaemonOnly(home))
	sub.subscribe(mcp.InboxURI)
	serveSocket(t, h, home)
	if uri := next(t, sub.updates); uri != mcp.InboxURI {
		t.Fatalf("update for %s, want the inbox once the daemon is back", uri)
	}
	alice := session(t, "alice", mcp.DaemonOnly(home))
	ok[mcp.WhoAmI](t, sub.cs, "mbx_whoami", nil) // registers bob
	ok[mcp.Sent](t, alice, "mbx_send", map[string]any{"to": []string{"bob"}, "body": "hello"})
	if uri := next(t, sub.updates); uri != mcp.InboxURI {
		t.Fatalf("update for %s, want the inbox", uri)
	}
}
