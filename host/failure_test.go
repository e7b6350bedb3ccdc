package host

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/internal/testkit"
	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/outbox"
)

// postHop sends a LAN request to th signed by key as host name at now (a nil key sends no hop
// headers) and returns the status and the answer.
func postHop(t *testing.T, th *testHost, key mbx.SigningKey, name, path string, body []byte, now time.Time) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://"+th.addr+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if !key.IsZero() {
		for k, v := range mbx.SignLANHop(key, name, 0, http.MethodPost, path, body, now) {
			req.Header[k] = v
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, data
}

// sealedFor builds an envelope from agent@from.name to to and seals it for target.
func sealedFor(t *testing.T, from *testHost, agent string, to []string, target *testHost) []byte {
	t.Helper()
	env, err := mbx.Build(mbx.Draft{From: agent + "@" + from.name, To: to, Subject: "crafted", Body: "crafted body"}, from.clock.Now(), from.ulids)
	if err != nil {
		t.Fatal(err)
	}
	_, wire, err := env.Seal(from.rand, target.enc.PublicKey(), from.name, from.key)
	if err != nil {
		t.Fatal(err)
	}
	return wire
}

// envelopesBody is {"envelopes":[w0,w1,…]} with each envelope's bytes as they are.
func envelopesBody(wires ...[]byte) []byte {
	return append(append([]byte(`{"envelopes":[`), bytes.Join(wires, []byte(","))...), "]}"...)
}

func TestDuplicateDeliveryShowsOnce(t *testing.T) {
	clock := newClock()
	a, b := newTestHost(t, "alpha", clock), newTestHost(t, "beta", clock)
	pairAll(t, a, b)
	ctx := context.Background()
	res := a.send("alice", []string{"bob@beta"}, "once", "only once")

	// beta stores the envelope but its answer is lost.
	b.gate.drop(1)
	if _, err := a.pass(ctx, true); err != nil {
		t.Fatal(err)
	}
	r := a.row(res.ID, "beta")
	if r.State != outbox.StatePending || r.Attempts != 1 || r.LastError == "" {
		t.Fatalf("after a lost answer: %s, %d attempts, error %q; want pending, 1, an error", r.State, r.Attempts, r.LastError)
	}
	if got := b.inbox("bob", true); len(got) != 1 {
		t.Fatalf("beta stored %d copies, want 1", len(got))
	}
	// The retry is a duplicate at beta, which ends the row done.
	clock.Advance(outbox.Backoff(0))
	settle(t, a, b)
	if r := a.row(res.ID, "beta"); r.State != outbox.StateDone {
		t.Fatalf("after the retry: %s, want done", r.State)
	}
	if got := b.inbox("bob", true); len(got) != 1 {
		t.Fatalf("after the retry beta shows %d copies, want 1", len(got))
	}
	// The same bytes once more: a duplicate, nothing new.
	before := b.counts()
	status, data := postHop(t, b, a.key, "alpha", mbx.PathLANEnvelopes, envelopesBody(r.Wire), clock.Now())
	var er mbx.EnvelopesResponse
	if status != 200 || json.Unmarshal(data, &er) != nil || len(er.Results) != 1 || er.Results[0].Status != mbx.StatusDuplicate || er.Results[0].ID != res.ID {
		t.Fatalf("repeat = %d %s, want 200 duplicate for %s", status, data, res.ID)
	}
	if after := b.counts(); !maps.Equal(before, after) {
		t.Errorf("a duplicate changed beta's store: %v → %v", before, after)
	}
}

func TestPeerDownGetsMailAfterBackoff(t *testing.T) {
	clock := newClock()
	a, b := newTestHost(t, "alpha", clock), newTestHost(t, "beta", clock)
	pairAll(t, a, b)
	ctx := context.Background()
	b.gate.setDown(true)
	res := a.send("alice", []string{"bob@beta"}, "later", "when you are back")

	wantWait := []time.Duration{5 * time.Second, 10 * time.Second, 20 * time.Second, 40 * time.Second}
	for i, wait := range wantWait {
		n, err := a.pass(ctx, true)
		if err != nil || n != 1 {
			t.Fatalf("attempt %d: pass sent %d, %v; want 1", i+1, n, err)
		}
		r := a.row(res.ID, "beta")
		if r.Attempts != i+1 || !r.NextAt.Equal(clock.Now().Add(wait)) || !strings.Contains(r.LastError, "503") {
			t.Fatalf("attempt %d: attempts %d, next_at %v (now %v), error %q; want %d, now+%v, a 503",
				i+1, r.Attempts, r.NextAt, clock.Now(), r.LastError, i+1, wait)
		}
		// Not due before its next_at.
		clock.Advance(wait - time.Millisecond)
		if n, _ := a.pass(ctx, true); n != 0 {
			t.Fatalf("attempt %d: a pass before next_at sent %d rows", i+1, n)
		}
		clock.Advance(time.Millisecond)
	}
	b.gate.setDown(false)
	settle(t, a, b)
	if r := a.row(res.ID, "beta"); r.State != outbox.StateDone || r.Attempts != 5 {
		t.Fatalf("row = %s after %d attempts, want done after 5", r.State, r.Attempts)
	}
	if got := subjects(b.inbox("bob", true)); len(got) != 1 || got[0] != "later" {
		t.Fatalf("bob's inbox = %q", got)
	}
}

func TestInboundHopMakesRowsDue(t *testing.T) {
	clock := newClock()
	a, b := newTestHost(t, "alpha", clock), newTestHost(t, "beta", clock)
	pairAll(t, a, b)
	ctx := context.Background()
	// beta is gone (connection refused), then comes back on another port.
	b.stop()
	res := a.send("alice", []string{"bob@beta"}, "waiting", "for beta")
	a.pass(ctx, true)
	a.pass(ctx, true) // not due: nothing
	if r := a.row(res.ID, "beta"); r.Attempts != 1 || r.State != outbox.StatePending {
		t.Fatalf("row = %s, %d attempts; want pending after 1", r.State, r.Attempts)
	}
	b.serve("127.0.0.1:0")
	if err := a.PinPeer(b.record()); err != nil { // its new address
		t.Fatal(err)
	}
	if n, _ := a.pass(ctx, true); n != 0 {
		t.Fatalf("a new address made the row due (%d sent); backoff should stand", n)
	}
	// beta writes to alpha: a verified hop from beta makes alpha's rows for beta due at once.
	b.send("bob", []string{"alice@alpha"}, "i am back", "hello")
	if n, _ := b.pass(ctx, true); n != 1 {
		t.Fatalf("beta sent %d rows, want 1", n)
	}
	if n, _ := a.pass(ctx, true); n == 0 {
		t.Fatal("alpha's row for beta is not due after beta's hop")
	}
	if r := a.row(res.ID, "beta"); r.State != outbox.StateDone {
		t.Fatalf("row = %s, want done", r.State)
	}
}

func TestUndeliveredAlertAfter72h(t *testing.T) {
	clock := newClock()
	a, b := newTestHost(t, "alpha", clock), newTestHost(t, "beta", clock)
	pairAll(t, a, b)
	ctx := context.Background()
	b.gate.setDown(true)
	res := a.send("alice", []string{"bob@beta"}, "deadline", "will not make it")
	a.pass(ctx, true)

	clock.Advance(72*time.Hour - time.Second)
	if n, err := a.sweep(ctx); err != nil || n != 0 {
		t.Fatalf("sweep before 72 h ended %d rows (%v)", n, err)
	}
	if got := a.inbox("alice", true); len(got) != 0 {
		t.Fatalf("alert before 72 h: %+v", got)
	}
	clock.Advance(2 * time.Second)
	if n, err := a.sweep(ctx); err != nil || n != 1 {
		t.Fatalf("sweep after 72 h ended %d rows (%v), want 1", n, err)
	}
	if r := a.row(res.ID, "beta"); r.State != outbox.StateExpired {
		t.Fatalf("row = %s, want expired", r.State)
	}
	got := a.inbox("alice", true)
	if len(got) != 1 {
		t.Fatalf("alice has %d messages, want the alert", len(got))
	}
	al := got[0]
	if al.From != AgentMBX || al.Kind != "alert" || al.Subject != "Undelivered to beta: deadline" ||
		!strings.Contains(al.Body, "not delivered within 72h") || !strings.Contains(al.Body, res.ID) || al.ReplyTo != res.ID {
		t.Fatalf("alert = %+v", al)
	}
	// An ended row is never sent again, and a second sweep alerts nobody twice.
	b.gate.setDown(false)
	clock.Advance(time.Hour)
	if n, _ := a.pass(ctx, true); n != 0 {
		t.Errorf("an expired row was sent")
	}
	if n, _ := a.sweep(ctx); n != 0 {
		t.Errorf("second sweep ended %d rows", n)
	}
	if got := a.inbox("alice", true); len(got) != 1 {
		t.Errorf("alice has %d messages after a second sweep, want 1", len(got))
	}
}

func TestRejectedEnvelopeAlerts(t *testing.T) {
	clock := newClock()
	a, b := newTestHost(t, "alpha", clock), newTestHost(t, "beta", clock)
	pairAll(t, a, b)
	ctx := context.Background()
	// alpha pins a wrong enc key for beta: beta cannot open what alpha seals.
	wrong, _ := mbx.GenerateEncKey(testkit.Rand(99))
	rec := b.record()
	rec.EncPub = wrong.PublicKey()
	if err := a.PinPeer(rec); err != nil {
		t.Fatal(err)
	}
	res := a.send("alice", []string{"bob@beta"}, "sealed wrong", "x")
	a.pass(ctx, true)
	r := a.row(res.ID, "beta")
	if r.State != outbox.StateRejected || !strings.Contains(r.Reason, "undecryptable") {
		t.Fatalf("row = %s (%q), want rejected: undecryptable", r.State, r.Reason)
	}
	got := a.inbox("alice", true)
	if len(got) != 1 || got[0].Subject != "Undelivered to beta: sealed wrong" || !strings.Contains(got[0].Body, "undecryptable") {
		t.Fatalf("alice's inbox = %+v, want the rejection alert", got)
	}
	if got := b.inbox("bob", true); len(got) != 0 {
		t.Fatalf("bob got %d messages", len(got))
	}
}

func TestBadRequestsStoreNothing(t *testing.T) {
	clock := newClock()
	a, b := newTestHost(t, "alpha", clock), newTestHost(t, "beta", clock)
	pairAll(t, a, b)
	mallory := newTestHost(t, "mallory", clock) // not paired with beta
	pairAll(t, mallory)
	now := clock.Now()
	good := sealedFor(t, a, "alice", []string{"bob@beta"}, b)
	body := envelopesBody(good)
	plain := func() []byte {
		env, _ := mbx.Build(mbx.Draft{From: "alice@alpha", To: []string{"bob@beta"}, Subject: "plain", Body: "x"}, now, a.ulids)
		env.Sign("alpha", a.key)
		w, _ := env.Marshal()
		return w
	}()
	tampered := bytes.Replace(good, []byte(`"subject":"crafted"`), []byte(`"subject":"tampered"`), 1)
	fromMallory := sealedFor(t, mallory, "eve", []string{"bob@beta"}, b)
	big := append(append([]byte(`{"envelopes":["`), bytes.Repeat([]byte("x"), mbx.MaxLANBody)...), `"]}`...)

	type want struct {
		status int
		result string // the one envelope's status, for 200
	}
	cases := []struct {
		name string
		key  mbx.SigningKey
		host string
		path string
		body []byte
		at   time.Time
		want want
	}{
		{"unpaired host", mallory.key, "mallory", mbx.PathLANEnvelopes, envelopesBody(fromMallory), now, want{401, ""}},
		{"paired name, another key", mallory.key, "alpha", mbx.PathLANEnvelopes, body, now, want{401, ""}},
		{"no hop headers", mbx.SigningKey{}, "", mbx.PathLANEnvelopes, body, now, want{401, ""}},
		{"stale hop", a.key, "alpha", mbx.PathLANEnvelopes, body, now.Add(-6 * time.Minute), want{401, ""}},
		{"hop from the future", a.key, "alpha", mbx.PathLANEnvelopes, body, now.Add(6 * time.Minute), want{401, ""}},
		{"receipts, unpaired", mallory.key, "mallory", mbx.PathLANReceipts, []byte(`{"receipts":[]}`), now, want{401, ""}},
		{"oversized body", a.key, "alpha", mbx.PathLANEnvelopes, big, now, want{413, ""}},
		{"body not JSON", a.key, "alpha", mbx.PathLANEnvelopes, []byte("not json"), now, want{400, ""}},
		{"no envelopes member", a.key, "alpha", mbx.PathLANEnvelopes, []byte(`{"items":[]}`), now, want{400, ""}},
		{"receipts not a list", a.key, "alpha", mbx.PathLANReceipts, []byte(`{"receipts":7}`), now, want{400, ""}},
		{"malformed envelope", a.key, "alpha", mbx.PathLANEnvelopes, []byte(`{"envelopes":[{"v":3,"id":"x"}]}`), now, want{200, "rejected:"}},
		{"envelope not an object", a.key, "alpha", mbx.PathLANEnvelopes, []byte(`{"envelopes":["hello"]}`), now, want{200, "rejected:"}},
		{"tampered envelope", a.key, "alpha", mbx.PathLANEnvelopes, envelopesBody(tampered), now, want{200, "rejected:bad signature"}},
		{"envelope of another host", a.key, "alpha", mbx.PathLANEnvelopes, envelopesBody(fromMallory), now, want{200, "rejected:sender host mismatch"}},
		{"plaintext on v2", a.key, "alpha", mbx.PathLANEnvelopes, envelopesBody(plain), now, want{200, "rejected:envelope is not sealed"}},
		{"garbage receipt", a.key, "alpha", mbx.PathLANReceipts, []byte(`{"receipts":[{"rec":{},"sig":"x"}]}`), now, want{200, "rejected:"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := b.counts()
			status, data := postHop(t, b, tc.key, tc.host, tc.path, tc.body, tc.at)
			if status != tc.want.status {
				t.Fatalf("status = %d (%s), want %d", status, data, tc.want.status)
			}
			if tc.want.result != "" {
				var res struct {
					Results []struct{ Status string } `json:"results"`
				}
				if err := json.Unmarshal(data, &res); err != nil || len(res.Results) != 1 {
					t.Fatalf("answer %s: %v", data, err)
				}
				if !strings.HasPrefix(res.Results[0].Status, tc.want.result) {
					t.Fatalf("result = %q, want %q…", res.Results[0].Status, tc.want.result)
				}
			} else if status != 200 && !json.Valid(data) {
				t.Errorf("error answer is not JSON: %s", data)
			}
			if after := b.counts(); !maps.Equal(before, after) {
				t.Errorf("refused request changed the store: %v → %v", before, after)
			}
		})
	}
	// The good envelope still goes through afterwards, once.
	status, data := postHop(t, b, a.key, "alpha", mbx.PathLANEnvelopes, body, now)
	if status != 200 || !strings.Contains(string(data), `"accepted"`) {
		t.Fatalf("good envelope: %d %s", status, data)
	}
	if got := b.inbox("bob", true); len(got) != 1 {
		t.Fatalf("bob has %d messages, want 1", len(got))
	}
	// plaintext is accepted on the v1 path (0.5.x senders)
	status, data = postHop(t, b, a.key, "alpha", mbx.PathLANEnvelopesV1, envelopesBody(plain), now)
	if status != 200 || !strings.Contains(string(data), `"accepted"`) {
		t.Fatalf("plaintext on v1: %d %s", status, data)
	}
}

func TestSendRefusesBadInput(t *testing.T) {
	clock := newClock()
	a, b := newTestHost(t, "alpha", clock), newTestHost(t, "beta", clock)
	pairAll(t, a, b)
	ctx := context.Background()
	cases := []struct {
		name string
		req  api.SendRequest
		want error
	}{
		{"unknown host", api.SendRequest{From: "alice", To: []string{"bob@beta", "xy@nowhere"}, Body: "b"}, api.ErrUnknownHost},
		{"bad address", api.SendRequest{From: "alice", To: []string{"Bob@beta"}, Body: "b"}, api.ErrInvalid},
		{"bad role", api.SendRequest{From: "alice", To: []string{"role:"}, Body: "b"}, api.ErrInvalid},
		{"no address", api.SendRequest{From: "alice", Body: "b"}, api.ErrNoRecipients},
		{"bad sender", api.SendRequest{From: "Alice", To: []string{"bob@beta"}, Body: "b"}, api.ErrInvalid},
		{"reserved sender", api.SendRequest{From: "mbx", To: []string{"bob@beta"}, Body: "b"}, api.ErrReserved},
		{"to mbx", api.SendRequest{From: "alice", To: []string{"mbx@alpha"}, Body: "b"}, api.ErrReserved},
		{"bad kind", api.SendRequest{From: "alice", To: []string{"bob@beta"}, Body: "b", Kind: "memo"}, api.ErrInvalid},
		{"body too large", api.SendRequest{From: "alice", To: []string{"bob@beta"}, Body: strings.Repeat("x", mbx.MaxBody+1)}, api.ErrInvalid},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := a.counts()
			_, err := a.Send(ctx, tc.req)
			if !isErr(err, tc.want) {
				t.Fatalf("Send = %v, want %v", err, tc.want)
			}
			if after := a.counts(); !maps.Equal(before, after) {
				t.Errorf("refused send changed the store: %v → %v", before, after)
			}
		})
	}
	// Alone on a host with no peers, * reaches nobody.
	c := newTestHost(t, "gamma", clock)
	if _, err := c.Send(ctx, api.SendRequest{From: "carl", To: []string{"*"}, Body: "anyone?"}); !isErr(err, api.ErrNoRecipients) {
		t.Errorf("broadcast with nobody = %v, want api.ErrNoRecipients", err)
	}
	// Without a subject the first line of the body is the subject.
	res := a.send("alice", []string{"alice@alpha"}, "", "\n  first line\nsecond")
	if got := a.inbox("alice", false); len(got) != 1 || got[0].ID != res.ID || got[0].Subject != "first line" {
		t.Errorf("subject = %+v, want \"first line\"", got)
	}
}
