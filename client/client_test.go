package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/client"
	"github.com/agentmbx/agentmbx/host/control"
)

// fake is an in-memory api.Service: a mailbox per agent, enough to check that every call and
// answer crosses the socket intact.
type fake struct {
	mu      sync.Mutex
	n       int
	boxes   map[string][]api.Message
	agents  []api.Agent
	peers   []api.Peer
	changed chan struct{} // closed and replaced on every new message
	fail    error         // when set, every call fails with it
	cards   int
	lastTO  time.Duration
}

func newFake() *fake {
	return &fake{boxes: map[string][]api.Message{}, changed: make(chan struct{})}
}

func (f *fake) setFail(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail = err
}

func (f *fake) err() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fail
}

func (f *fake) Send(_ context.Context, req api.SendRequest) (api.SendResult, error) {
	if err := f.err(); err != nil {
		return api.SendResult{}, err
	}
	if req.Body == "" {
		return api.SendResult{}, fmt.Errorf("send: empty body: %w", client.ErrBadRequest)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n++
	id := fmt.Sprintf("01JTEST%019d", f.n)
	var res api.SendResult
	res.ID = id
	for _, to := range req.To {
		name, _, _ := strings.Cut(to, "@")
		f.boxes[name] = append(f.boxes[name], api.Message{ID: id, From: req.From + "@h1", To: req.To,
			Subject: req.Subject, Body: req.Body, Kind: "message", TS: "2026-10-02T10:00:00.000Z",
			Agent: name, State: "delivered"})
		res.Local = append(res.Local, name+"@h1")
	}
	close(f.changed)
	f.changed = make(chan struct{})
	return res, nil
}

func (f *fake) unread(agent string) []api.Message {
	var out []api.Message
	for _, m := range f.boxes[agent] {
		if m.State == "delivered" || m.State == "notified" {
			out = append(out, m)
		}
	}
	return out
}

func (f *fake) Inbox(_ context.Context, agent string, all bool) ([]api.Message, error) {
	if err := f.err(); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if all {
		return append([]api.Message(nil), f.boxes[agent]...), nil
	}
	return f.unread(agent), nil
}

func (f *fake) setState(id, agent, state, note string) (api.Message, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, m := range f.boxes[agent] {
		if m.ID == id {
			f.boxes[agent][i].State = state
			f.boxes[agent][i].Note = note
			return f.boxes[agent][i], nil
		}
	}
	return api.Message{}, &hintErr{fmt.Errorf("message %s of %s: %w", id, agent, client.ErrNotFound), "list the mail with `agentmbx inbox --all`"}
}

func (f *fake) Read(_ context.Context, req api.ReadRequest) (api.Message, error) {
	return f.setState(req.ID, req.Agent, "read", "")
}

func (f *fake) Ack(_ context.Context, req api.AckRequest) (api.Message, error) {
	return f.setState(req.ID, req.Agent, "acked", req.Note)
}

func (f *fake) Sent(_ context.Context, id string) (api.Sent, error) {
	if id == "" {
		return api.Sent{}, fmt.Errorf("sent: no id: %w", client.ErrBadRequest)
	}
	return api.Sent{ID: id, Subject: "s", From: "alice@h1", Recipients: []api.Recipient{{Recipient: "bob@h2", Host: "h2", State: "queued"}}}, nil
}

func (f *fake) Outbox(context.Context) ([]api.OutboxRow, error) {
	return []api.OutboxRow{{MsgID: "m1", Host: "h2", Kind: "envelope", State: "pending", Transport: "lan", Attempts: 2, NextAt: "2026-10-02T10:00:05.000Z", LastError: "connection refused"}}, nil
}

func (f *fake) Agents(context.Context) ([]api.Agent, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.agents, nil
}

func (f *fake) AddAgent(_ context.Context, a api.Agent) (api.Agent, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.agents = append(f.agents, a)
	return a, nil
}

func (f *fake) Peers(context.Context) ([]api.Peer, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.peers, nil
}

func (f *fake) AddPeer(_ context.Context, card []byte) (api.Peer, error) {
	if string(card) != `{"host":"h2"}` {
		return api.Peer{}, codeErr{"card signature does not verify", api.CodeRefused}
	}
	p := api.Peer{Host: "h2", HostPubkey: "pk", Fingerprint: "aaaa-bbbb-cccc-dddd", EncPub: "ek", Addr: "127.0.0.1:7373"}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.peers = append(f.peers, p)
	return p, nil
}

func (f *fake) RemovePeer(_ context.Context, host string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, p := range f.peers {
		if p.Host == host {
			f.peers = append(f.peers[:i], f.peers[i+1:]...)
			return nil
		}
	}
	return fmt.Errorf("peer %q: %w", host, client.ErrNotFound)
}

func (f *fake) Wait(ctx context.Context, agent string, timeout time.Duration) ([]api.Message, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		f.mu.Lock()
		f.lastTO = timeout
		msgs, ch := f.unread(agent), f.changed
		f.mu.Unlock()
		if len(msgs) > 0 {
			return msgs, nil
		}
		select {
		case <-ch:
		case <-t.C:
			return nil, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (f *fake) Status(context.Context) (api.Status, error) {
	return api.Status{Host: "h1", HostPubkey: "pk1", Fingerprint: "1111-2222-3333-4444", Peers: 1, Agents: 2}, nil
}

func (f *fake) Card(_ context.Context, addr string) ([]byte, error) {
	f.mu.Lock()
	f.cards++
	f.mu.Unlock()
	return []byte(fmt.Sprintf(`{"card":{"host":"h1","addr":%q},"sig":"x"}`, addr)), nil
}

type hintErr struct {
	err  error
	hint string
}

func (h *hintErr) Error() string { return h.err.Error() }
func (h *hintErr) Unwrap() error { return h.err }
func (h *hintErr) Hint() string  { return h.hint }

type codeErr struct{ msg, code string }

func (e codeErr) Error() string { return e.msg }
func (e codeErr) Code() string  { return e.code }

// shortDir returns a fresh directory with a short path: Unix socket paths are limited to about
// 100 bytes, and t.TempDir's can be longer.
func shortDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "mbx")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// serve serves svc through NewHandler on a real socket in a fresh home and returns the home.
func serve(t *testing.T, svc api.Service) string {
	t.Helper()
	home := shortDir(t)
	ln, err := net.Listen("unix", client.SocketPath(home))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: control.NewHandler(svc, nil)}
	done := make(chan struct{})
	go func() { srv.Serve(ln); close(done) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		<-done
	})
	return home
}

func dial(t *testing.T, home string) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, home)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func TestRoundTrip(t *testing.T) {
	f := newFake()
	c := dial(t, serve(t, f))
	ctx := testCtx(t)

	res, err := c.Send(ctx, api.SendRequest{From: "alice", To: []string{"bob@h1"}, Subject: "hello <&>", Body: "line1\nline2 \u2028"})
	if err != nil {
		t.Fatalf("Send: %v", err)
	}
	if want := []string{"bob@h1"}; res.ID == "" || !reflect.DeepEqual(res.Local, want) {
		t.Fatalf("Send = %+v, want an id and local %v", res, want)
	}

	inbox, err := c.Inbox(ctx, "bob", false)
	if err != nil {
		t.Fatalf("Inbox: %v", err)
	}
	if len(inbox) != 1 || inbox[0].Body != "line1\nline2 \u2028" || inbox[0].Subject != "hello <&>" || inbox[0].ID != res.ID {
		t.Fatalf("Inbox = %+v, want the one message sent", inbox)
	}

	m, err := c.Read(ctx, api.ReadRequest{ID: res.ID, Agent: "bob"})
	if err != nil || m.State != "read" {
		t.Fatalf("Read = %+v, %v; want state read", m, err)
	}
	m, err = c.Ack(ctx, api.AckRequest{ID: res.ID, Agent: "bob", Note: "thanks"})
	if err != nil || m.State != "acked" || m.Note != "thanks" {
		t.Fatalf("Ack = %+v, %v; want acked with the note", m, err)
	}
	if inbox, err := c.Inbox(ctx, "bob", false); err != nil || inbox == nil || len(inbox) != 0 {
		t.Fatalf("Inbox after ack = %#v, %v; want an empty non-nil list", inbox, err)
	}
	if all, err := c.Inbox(ctx, "bob", true); err != nil || len(all) != 1 {
		t.Fatalf("Inbox all = %+v, %v; want the acked message", all, err)
	}

	sent, err := c.Sent(ctx, res.ID)
	if err != nil || sent.ID != res.ID || len(sent.Recipients) != 1 || sent.Rows == nil {
		t.Fatalf("Sent = %+v, %v", sent, err)
	}
	rows, err := c.Outbox(ctx)
	if want, _ := f.Outbox(ctx); err != nil || !reflect.DeepEqual(rows, want) {
		t.Fatalf("Outbox = %+v, %v; want %+v", rows, err, want)
	}

	if as, err := c.Agents(ctx); err != nil || as == nil || len(as) != 0 {
		t.Fatalf("Agents = %#v, %v; want an empty list", as, err)
	}
	if a, err := c.AddAgent(ctx, api.Agent{Name: "carol", Role: "reviewer"}); err != nil || a.Role != "reviewer" {
		t.Fatalf("AddAgent = %+v, %v", a, err)
	}
	if as, err := c.Agents(ctx); err != nil || !reflect.DeepEqual(as, []api.Agent{{Name: "carol", Role: "reviewer"}}) {
		t.Fatalf("Agents = %+v, %v", as, err)
	}

	p, err := c.AddPeer(ctx, []byte(`{"host":"h2"}`))
	if err != nil || p.Host != "h2" || p.Addr != "127.0.0.1:7373" {
		t.Fatalf("AddPeer = %+v, %v", p, err)
	}
	if ps, err := c.Peers(ctx); err != nil || !reflect.DeepEqual(ps, []api.Peer{p}) {
		t.Fatalf("Peers = %+v, %v", ps, err)
	}
	if err := c.RemovePeer(ctx, "h2"); err != nil {
		t.Fatalf("RemovePeer: %v", err)
	}
	if err := c.RemovePeer(ctx, "h2"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("RemovePeer again: %v, want ErrNotFound", err)
	}

	st, err := c.Status(ctx)
	if err != nil || st.Host != "h1" || !st.Daemon || st.Agents != 2 {
		t.Fatalf("Status = %+v, %v", st, err)
	}
	card, err := c.Card(ctx, "10.0.0.1:7373")
	if want := `{"card":{"host":"h1","addr":"10.0.0.1:7373"},"sig":"x"}`; err != nil || string(card) != want {
		t.Fatalf("Card = %s, %v; want %s", card, err, want)
	}
}

func TestErrors(t *testing.T) {
	f := newFake()
	c := dial(t, serve(t, f))
	ctx := testCtx(t)

	tests := []struct {
		name     string
		call     func() error
		sentinel error
		msg      string
		hint     string
	}{
		{"not found with hint", func() error {
			_, err := c.Read(ctx, api.ReadRequest{ID: "nope", Agent: "bob"})
			return err
		}, client.ErrNotFound, "message nope of bob: not found", "list the mail with `agentmbx inbox --all`"},
		{"bad request", func() error {
			_, err := c.Send(ctx, api.SendRequest{From: "alice", To: []string{"bob"}})
			return err
		}, client.ErrBadRequest, "send: empty body: bad request", ""},
		{"coder", func() error {
			_, err := c.AddPeer(ctx, []byte(`{"host":"evil"}`))
			return err
		}, client.ErrRefused, "card signature does not verify", ""},
		{"bad wait timeout", func() error {
			_, err := c.Wait(ctx, "bob", time.Hour)
			return err
		}, client.ErrBadRequest, `bad wait timeout "1h0m0s"`, "a duration from 0s to 10m0s, like 30s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			if !errors.Is(err, tt.sentinel) {
				t.Fatalf("got %v, want errors.Is %v", err, tt.sentinel)
			}
			if err.Error() != tt.msg {
				t.Errorf("message = %q, want %q", err.Error(), tt.msg)
			}
			var h interface{ Hint() string }
			if errors.As(err, &h); (h == nil && tt.hint != "") || (h != nil && h.Hint() != tt.hint) {
				t.Errorf("hint = %v, want %q", h, tt.hint)
			}
			for _, other := range []error{client.ErrNotFound, client.ErrBadRequest, client.ErrRefused, client.ErrInternal, client.ErrNoDaemon} {
				if other != tt.sentinel && errors.Is(err, other) { //nolint:errorlint // two sentinels, compared as values
					t.Errorf("error also matches %v", other)
				}
			}
		})
	}

	t.Run("unclassified is internal", func(t *testing.T) {
		f.setFail(errors.New("disk on fire"))
		defer f.setFail(nil)
		_, err := c.Inbox(ctx, "bob", false)
		var e *client.Error
		if !errors.As(err, &e) || !errors.Is(err, client.ErrInternal) || e.Status != http.StatusInternalServerError || e.Message != "disk on fire" {
			t.Fatalf("got %#v, want an internal *Error with status 500", err)
		}
	})
}

func TestCodeOf(t *testing.T) {
	tests := []struct {
		err  error
		want string
	}{
		{fmt.Errorf("x: %w", client.ErrNotFound), api.CodeNotFound},
		{fmt.Errorf("x: %w", client.ErrConflict), api.CodeConflict},
		{codeErr{"y", "too_large"}, api.CodeTooLarge},
		{fmt.Errorf("wrapped: %w", codeErr{"y", api.CodeUnavailable}), api.CodeUnavailable},
		{fmt.Errorf("x: %w", context.DeadlineExceeded), api.CodeTimeout},
		{&client.Error{Message: "m", Code: api.CodeRefused}, api.CodeRefused},
		{errors.New("plain"), api.CodeInternal},
	}
	for _, tt := range tests {
		if got := api.CodeOf(tt.err); got != tt.want {
			t.Errorf("CodeOf(%v) = %q, want %q", tt.err, got, tt.want)
		}
	}
}

func TestDialNoDaemon(t *testing.T) {
	ctx := testCtx(t)
	t.Run("no socket", func(t *testing.T) {
		_, err := client.Dial(ctx, shortDir(t))
		if !errors.Is(err, client.ErrNoDaemon) {
			t.Fatalf("got %v, want ErrNoDaemon", err)
		}
	})
	t.Run("no home", func(t *testing.T) {
		_, err := client.Dial(ctx, filepath.Join(shortDir(t), "missing"))
		if !errors.Is(err, client.ErrNoDaemon) {
			t.Fatalf("got %v, want ErrNoDaemon", err)
		}
	})
	t.Run("stale socket", func(t *testing.T) {
		home := shortDir(t)
		ln, err := net.Listen("unix", client.SocketPath(home))
		if err != nil {
			t.Fatal(err)
		}
		ln.(*net.UnixListener).SetUnlinkOnClose(false)
		ln.Close()
		if _, err := os.Stat(client.SocketPath(home)); err != nil {
			t.Fatalf("socket file should remain: %v", err)
		}
		_, err = client.Dial(ctx, home)
		if !errors.Is(err, client.ErrNoDaemon) {
			t.Fatalf("got %v, want ErrNoDaemon", err)
		}
	})
	t.Run("path too long", func(t *testing.T) {
		_, err := client.Dial(ctx, "/"+strings.Repeat("x", 120))
		if !errors.Is(err, client.ErrNoDaemon) {
			t.Fatalf("got %v, want ErrNoDaemon", err)
		}
	})
}

func TestWait(t *testing.T) {
	f := newFake()
	c := dial(t, serve(t, f))
	ctx := testCtx(t)

	t.Run("answers on new mail", func(t *testing.T) {
		type result struct {
			msgs []api.Message
			err  error
		}
		got := make(chan result, 1)
		go func() {
			msgs, err := c.Wait(ctx, "dora", time.Minute)
			got <- result{msgs, err}
		}()
		// Wait until the long poll is parked in the service, so the send below wakes it rather
		// than being found by its first look.
		for {
			f.mu.Lock()
			parked := f.lastTO == time.Minute
			f.mu.Unlock()
			if parked {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		res, err := c.Send(ctx, api.SendRequest{From: "alice", To: []string{"dora"}, Body: "wake up"})
		if err != nil {
			t.Fatal(err)
		}
		r := <-got
		if r.err != nil || len(r.msgs) != 1 || r.msgs[0].ID != res.ID {
			t.Fatalf("Wait = %+v, %v; want the message %s", r.msgs, r.err, res.ID)
		}
	})
	t.Run("empty on timeout", func(t *testing.T) {
		msgs, err := c.Wait(ctx, "nobody", 10*time.Millisecond)
		if err != nil || msgs == nil || len(msgs) != 0 {
			t.Fatalf("Wait = %#v, %v; want an empty list", msgs, err)
		}
	})
	t.Run("ends with its context", func(t *testing.T) {
		wctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			_, err := c.Wait(wctx, "nobody", 5*time.Minute)
			done <- err
		}()
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("Wait = %v, want context.Canceled", err)
		}
	})
}

// TestHandlerWire checks answers to requests the Client never makes: hand-written ones.
func TestHandlerWire(t *testing.T) {
	home := serve(t, newFake())
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", client.SocketPath(home))
	}}}
	defer hc.CloseIdleConnections()

	tests := []struct {
		name, method, path, body string
		status                   int
		want                     string // substring of the answer
	}{
		{"unknown field", "POST", "/v1/send", `{"from":"a","to":["b"],"body":"x","bdy":"typo"}`, 400, `"code":"bad_request"`},
		{"trailing data", "POST", "/v1/read", `{"id":"x","agent":"b"} {}`, 400, `data after the JSON object`},
		{"not json", "POST", "/v1/ack", `ack it`, 400, `"code":"bad_request"`},
		{"unknown route", "GET", "/v1/nope", ``, 404, `"code":"not_found"`},
		{"wrong method", "DELETE", "/v1/send", ``, 400, `method DELETE not allowed`},
		{"bad bool", "GET", "/v1/inbox?agent=b&all=yes", ``, 400, `bad boolean`},
		{"card too large", "POST", "/v1/peers", strings.Repeat("x", control.MaxCardBody+1), 413, `"code":"too_large"`},
		{"empty list", "GET", "/v1/inbox?agent=b", ``, 200, "[]\n"},
		{"delete answers an object", "DELETE", "/v1/peers?host=x", ``, 404, `"code":"not_found"`},
		{"html stays raw", "POST", "/v1/send", `{"from":"a","to":["b"],"subject":"<&>","body":"x"}`, 200, `"id":"01JTEST`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequest(tt.method, "http://agentmbx"+tt.path, strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			data, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.status || !strings.Contains(string(data), tt.want) {
				t.Fatalf("%s %s = %d %s, want %d containing %q", tt.method, tt.path, resp.StatusCode, data, tt.status, tt.want)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type = %q, want application/json", ct)
			}
		})
	}
}

// TestConcurrentSends drives the pair with many senders at once (run with -race).
func TestConcurrentSends(t *testing.T) {
	f := newFake()
	c := dial(t, serve(t, f))
	ctx := testCtx(t)
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for i := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 10 {
				if _, err := c.Send(ctx, api.SendRequest{From: "a", To: []string{"bob"}, Body: fmt.Sprintf("%d/%d", i, j)}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if all, err := c.Inbox(ctx, "bob", true); err != nil || len(all) != 320 {
		t.Fatalf("Inbox has %d messages (%v), want 320", len(all), err)
	}
}

// coded is a service with its own sentinel, classified by ErrorCode.
type coded struct{ *fake }

var errGone = errors.New("agent is gone")

func (coded) ErrorCode(err error) string {
	if errors.Is(err, errGone) {
		return api.CodeNotFound
	}
	return ""
}

func TestErrorCoder(t *testing.T) {
	f := newFake()
	c := dial(t, serve(t, coded{f}))
	ctx := testCtx(t)
	f.setFail(fmt.Errorf("inbox of zed: %w", errGone))
	if _, err := c.Inbox(ctx, "zed", false); !errors.Is(err, client.ErrNotFound) || err.Error() != "inbox of zed: agent is gone" {
		t.Fatalf("Inbox = %v, want ErrNotFound by the service's ErrorCode", err)
	}
	f.setFail(errors.New("other"))
	if _, err := c.Inbox(ctx, "zed", false); !errors.Is(err, client.ErrInternal) {
		t.Fatalf("Inbox = %v, want ErrInternal when ErrorCode leaves it", err)
	}
	f.setFail(nil)
	// The handler's own errors keep their code whatever the service says.
	if _, err := c.Wait(ctx, "zed", -time.Second); !errors.Is(err, client.ErrBadRequest) {
		t.Fatalf("Wait = %v, want ErrBadRequest", err)
	}
}

// fakePairer is a pairing session in memory: an api.PairingService whose state changes wake
// WaitPairing.
type fakePairer struct {
	mu       sync.Mutex
	st       api.PairingState
	changed  chan struct{}
	ttl      time.Duration
	accepted *bool
}

func newFakePairer() *fakePairer { return &fakePairer{changed: make(chan struct{})} }

// setLocked changes the state and wakes the waiters.
func (p *fakePairer) setLocked(st api.PairingState) {
	p.st = st
	close(p.changed)
	p.changed = make(chan struct{})
}

func (p *fakePairer) StartPairing(_ context.Context, ttl time.Duration) (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.st.State == api.PairWaiting {
		return "", fmt.Errorf("pairing: %w", client.ErrConflict)
	}
	p.ttl = ttl
	p.setLocked(api.PairingState{State: api.PairWaiting, Role: api.PairInviter})
	return "ABCD-EFGH-JKMN", nil
}

func (p *fakePairer) PairingStatus(context.Context) (api.PairingState, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.st, nil
}

func (p *fakePairer) WaitPairing(ctx context.Context, from api.PairState) (api.PairingState, error) {
	for {
		p.mu.Lock()
		st, ch := p.st, p.changed
		p.mu.Unlock()
		if st.State != from {
			return st, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return st, ctx.Err()
		}
	}
}

func (p *fakePairer) JoinPairing(_ context.Context, addr, token string) (api.PairingState, error) {
	if token != "ABCD-EFGH-JKMN" {
		return api.PairingState{}, codeErr{"wrong pairing token", api.CodeRefused}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.setLocked(api.PairingState{State: api.PairCode, Code: "123456", Peer: &api.Peer{Host: "h2", Addr: addr}})
	return p.st, nil
}

func (p *fakePairer) ConfirmPairing(_ context.Context, accept bool) (api.Peer, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.accepted = &accept
	if !accept {
		p.setLocked(api.PairingState{State: api.PairDeclined})
		return api.Peer{}, codeErr{"pairing declined", api.CodeRefused}
	}
	p.setLocked(api.PairingState{State: api.PairDone})
	return api.Peer{Host: "h2", Fingerprint: "aaaa-bbbb-cccc-dddd"}, nil
}

// seen returns what the pairer was given, under its lock.
func (p *fakePairer) seen() (ttl time.Duration, accepted *bool, state api.PairState) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ttl, p.accepted, p.st.State
}

func (p *fakePairer) CancelPairing(context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.setLocked(api.PairingState{State: api.PairFailed})
	return nil
}

func TestPairing(t *testing.T) {
	p := newFakePairer()
	home := shortDir(t)
	ln, err := net.Listen("unix", client.SocketPath(home))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: control.NewHandler(newFake(), p)}
	go srv.Serve(ln)
	defer srv.Close()
	c := dial(t, home)
	ctx := testCtx(t)

	tok, err := c.StartPairing(ctx, 5*time.Minute)
	if ttl, _, _ := p.seen(); err != nil || tok != "ABCD-EFGH-JKMN" || ttl != 5*time.Minute {
		t.Fatalf("StartPairing = %q, %v (ttl %v)", tok, err, ttl)
	}
	if _, err := c.StartPairing(ctx, 0); !errors.Is(err, client.ErrConflict) {
		t.Fatalf("second StartPairing = %v, want ErrConflict", err)
	}
	st, err := c.PairingStatus(ctx)
	if err != nil || st.State != api.PairWaiting || st.Role != api.PairInviter {
		t.Fatalf("PairingStatus = %+v, %v", st, err)
	}
	// WaitPairing is held by the daemon until the join changes the state.
	waited := make(chan api.PairingState, 1)
	go func() {
		st, err := c.WaitPairing(ctx, api.PairWaiting)
		if err != nil {
			t.Errorf("WaitPairing: %v", err)
		}
		waited <- st
	}()
	if _, err := c.JoinPairing(ctx, "10.0.0.2:7373", "WRONG"); !errors.Is(err, client.ErrRefused) || strings.Contains(err.Error(), "WRONG") {
		t.Fatalf("JoinPairing with a wrong token = %v, want ErrRefused without the token", err)
	}
	st, err = c.JoinPairing(ctx, "10.0.0.2:7373", tok)
	if err != nil || st.State != api.PairCode || st.Code != "123456" || st.Peer == nil || st.Peer.Addr != "10.0.0.2:7373" {
		t.Fatalf("JoinPairing = %+v, %v", st, err)
	}
	if w := <-waited; w.State != api.PairCode || w.Code != "123456" {
		t.Fatalf("WaitPairing from waiting = %+v, want the code state", w)
	}
	peer, err := c.ConfirmPairing(ctx, true)
	if _, acc, _ := p.seen(); err != nil || peer.Host != "h2" || acc == nil || !*acc {
		t.Fatalf("ConfirmPairing = %+v, %v", peer, err)
	}
	if _, err := c.ConfirmPairing(ctx, false); !errors.Is(err, client.ErrRefused) {
		t.Fatalf("ConfirmPairing(false) = %v, want ErrRefused", err)
	}
	if _, acc, _ := p.seen(); *acc {
		t.Fatalf("ConfirmPairing(false) did not pass the answer on")
	}
	if err := c.CancelPairing(ctx); err != nil {
		t.Fatalf("CancelPairing = %v", err)
	}
	if _, _, st := p.seen(); st != api.PairFailed {
		t.Fatalf("state after CancelPairing = %s, want failed", st)
	}

	// A confirmation must say which answer; a wait must name a state.
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", client.SocketPath(home))
	}}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Post("http://agentmbx/v1/pair/confirm", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("confirm without accept: status %d, want 400", resp.StatusCode)
	}
	resp, err = hc.Get("http://agentmbx/v1/pair/wait?from=nonsense")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("wait from an unknown state: status %d, want 400", resp.StatusCode)
	}
}

func TestPairingNotServed(t *testing.T) {
	c := dial(t, serve(t, newFake()))
	_, err := c.StartPairing(testCtx(t), 0)
	var h interface{ Hint() string }
	if !errors.Is(err, client.ErrNotFound) || !errors.As(err, &h) || !strings.Contains(h.Hint(), "stop the daemon") {
		t.Fatalf("StartPairing without a PairingService = %v, want ErrNotFound with a hint", err)
	}
}
