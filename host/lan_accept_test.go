package host

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/outbox"
)

// impostor answers at a peer's LAN address: every envelope "accepted", with no statement, or
// with one for sender signed by key (claiming the pinned peer's key as target), and stores
// nothing.
func impostor(t *testing.T, key *mbx.SigningKey, claim, sender string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req mbx.EnvelopesRequest
		if err := json.Unmarshal(body, &req); err != nil {
			http.Error(w, `{"error":"bad"}`, http.StatusBadRequest)
			return
		}
		var res mbx.EnvelopesResponse
		for _, e := range req.Envelopes {
			var x struct {
				ID string `json:"id"`
			}
			json.Unmarshal(e, &x)
			out := mbx.EnvelopeResult{ID: x.ID, Status: mbx.StatusAccepted}
			if key != nil {
				stmt, sig, err := mbx.SignLANAccept(*key, mbx.NewLANAccept(claim, sender, x.ID, e))
				if err != nil {
					t.Error(err)
				}
				out.Accept, out.Sig = stmt, sig
			}
			res.Results = append(res.Results, out)
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(res)
	})
}

// unsigning stands for a host that cannot sign (0.5.x): the real host answers, and its answers
// lose their statements on the way.
func unsigning(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := httptest.NewRecorder()
		next.ServeHTTP(rec, r)
		var m map[string]any
		if rec.Code == http.StatusOK && json.Unmarshal(rec.Body.Bytes(), &m) == nil {
			if rs, ok := m["results"].([]any); ok {
				for _, x := range rs {
					if e, ok := x.(map[string]any); ok {
						delete(e, "accept")
						delete(e, "sig")
					}
				}
				b, _ := json.Marshal(m)
				rec.Body = bytes.NewBuffer(b)
			}
		}
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.Header().Del("Content-Length")
		w.WriteHeader(rec.Code)
		w.Write(rec.Body.Bytes())
	})
}

// TestLANAnswerWithoutPeerSignature: once a peer has answered with its signed statement, an
// answer at its address without one (another machine got the address), or with a statement
// another key signed, ends no row: the row stays pending, status and doctor's input show the
// LAN alert, and the message is delivered, the row done and the alert cleared once the real
// peer answers there again.
func TestLANAnswerWithoutPeerSignature(t *testing.T) {
	other, err := mbx.SigningKeyFromSeed(mbx.B64(bytes.Repeat([]byte{7}, 32)))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		key  *mbx.SigningKey
		want string
	}{
		{"no statement", nil, "without a signed statement"},
		{"another key's signature", &other, "did not make"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := newClock()
			a, b := newTestHost(t, "alpha", clock), newTestHost(t, "beta", clock)
			pairAll(t, a, b)
			ctx := context.Background()

			// The real peer: its signed answer ends the row done.
			first := a.send("alice", []string{"bob@beta"}, "first", "via the real beta")
			settle(t, a, b)
			if r := a.row(first.ID, "beta"); r.State != outbox.StateDone {
				t.Fatalf("row to the real peer: %s, want done", r.State)
			}

			// Something else answers at beta's address.
			b.gate.setNext(impostor(t, tc.key, b.Key().PublicKey(), a.Key().PublicKey()))
			m := a.send("alice", []string{"bob@beta"}, "second", "must not be lost")
			settle(t, a, b)
			r := a.row(m.ID, "beta")
			if r.State != outbox.StatePending || !strings.Contains(r.LastError, "address now answered by another key") ||
				!strings.Contains(r.LastError, tc.want) || !r.LANUnsignedAt.IsZero() {
				t.Fatalf("row after the impostor's answer: %s, last error %q, unsigned mark %v; want pending with the alert",
					r.State, r.LastError, r.LANUnsignedAt)
			}
			st, err := a.Status(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(st.LANAlerts) != 1 || st.LANAlerts[0].Host != "beta" || st.LANAlerts[0].Addr != b.addr ||
				st.LANAlerts[0].Fingerprint != b.Key().Fingerprint() || !strings.Contains(st.LANAlerts[0].Error, tc.want) {
				t.Fatalf("status LAN alerts = %+v, want one for beta at %s", st.LANAlerts, b.addr)
			}
			if got := b.inbox("bob", true); len(got) != 1 {
				t.Fatalf("bob has %d messages, want only the first", len(got))
			}

			// The real beta answers there again: delivered, done, the alert gone.
			b.gate.setNext(b.LANMux())
			clock.Advance(2 * time.Hour)
			settle(t, a, b)
			if r := a.row(m.ID, "beta"); r.State != outbox.StateDone {
				t.Fatalf("row after the real peer returned: %s (%s), want done", r.State, r.LastError)
			}
			if got := b.inbox("bob", true); len(got) != 2 || (got[0].ID != m.ID && got[1].ID != m.ID) {
				t.Fatalf("bob's inbox = %v, want both messages", subjects(got))
			}
			if st, err := a.Status(ctx); err != nil || len(st.LANAlerts) != 0 {
				t.Fatalf("status LAN alerts after the signed answer = %+v, %v; want none", st.LANAlerts, err)
			}
		})
	}
}

// TestLANUnsignedPeer: a peer never heard signing (0.5.x) keeps getting its mail, but its rows
// are marked unsigned and wait, pending, until its signed delivery receipt settles them; no
// alert is raised for it.
func TestLANUnsignedPeer(t *testing.T) {
	clock := newClock()
	a, b := newTestHost(t, "alpha", clock), newTestHost(t, "beta", clock)
	pairAll(t, a, b)
	ctx := context.Background()
	b.gate.setNext(unsigning(b.LANMux()))

	m := a.send("alice", []string{"bob@beta"}, "old peer", "to a host that cannot sign")
	if _, err := a.pass(ctx, true); err != nil {
		t.Fatal(err)
	}
	r := a.row(m.ID, "beta")
	if r.State != outbox.StatePending || r.LANUnsignedAt.IsZero() || r.LastError != "" || r.Transport != outbox.TransportLAN {
		t.Fatalf("row after an unsigned answer: %s, unsigned mark %v, last error %q, over %s; want pending, marked", r.State, r.LANUnsignedAt, r.LastError, r.Transport)
	}
	if got := b.inbox("bob", true); len(got) != 1 || got[0].ID != m.ID {
		t.Fatalf("bob's inbox = %v, want the message (the peer stored it)", subjects(got))
	}
	rows, err := a.Outbox(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].LANUnsignedAt == "" || !strings.Contains(rows[0].Waiting, "unsigned") {
		t.Fatalf("outbox listing = %+v, want the row marked unsigned, waiting for its receipt", rows)
	}
	if st, err := a.Status(ctx); err != nil || len(st.LANAlerts) != 0 {
		t.Fatalf("status LAN alerts = %+v, %v; want none for a peer that never signed", st.LANAlerts, err)
	}
	// beta's delivery receipt (signed by beta's key, and answered by alpha's signing server)
	// settles the row.
	settle(t, a, b)
	if r := a.row(m.ID, "beta"); r.State != outbox.StateDone || r.LANUnsignedAt.IsZero() {
		t.Fatalf("row after beta's receipt: %s, want done (still marked)", r.State)
	}
	receipts := 0
	for _, rr := range b.rows() {
		if rr.Kind != outbox.KindReceipt {
			continue
		}
		receipts++
		if rr.State != outbox.StateDone || !rr.LANUnsignedAt.IsZero() {
			t.Fatalf("beta's receipt row to alpha: %s, unsigned mark %v; want done on alpha's statement", rr.State, rr.LANUnsignedAt)
		}
	}
	if receipts == 0 {
		t.Fatal("beta queued no delivery receipt")
	}
}
