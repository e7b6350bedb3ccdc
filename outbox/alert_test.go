package outbox

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func TestAlertFor(t *testing.T) {
	base := Row{
		ItemID: "01JABCDEFGHJKMNPQRSTVWXYZ0", MsgID: "01JABCDEFGHJKMNPQRSTVWXYZ0", Host: "work",
		Kind: KindEnvelope, Agent: "alice", Subject: "build report", Attempts: 7, Transport: TransportLAN,
	}
	with := func(f func(*Row)) Row { r := base; f(&r); return r }
	tests := []struct {
		name        string
		r           Row
		neverHeard  bool
		ok          bool
		subject     string
		bodyHas     []string
		bodyHasNone []string
	}{
		{"pending", base, false, false, "", nil, nil},
		{"relay-accepted", with(func(r *Row) { r.State = StateRelayAccepted }), false, false, "", nil, nil},
		{"done", with(func(r *Row) { r.State = StateDone }), false, false, "", nil, nil},
		{"expired", with(func(r *Row) {
			r.State, r.Reason, r.LastError = StateExpired, "not delivered within 72h", "dial tcp: i/o timeout"
		}), false, true, "Undelivered to work: build report",
			[]string{"not delivered within 72h", "i/o timeout", "Attempts: 7 (last over lan)", "01JABCDEFGHJKMNPQRSTVWXYZ0"}, nil},
		{"rejected", with(func(r *Row) {
			r.State, r.Reason, r.LastError, r.Transport = StateRejected, "rejected:sender not accepted by target", "rejected:sender not accepted by target", TransportRelay
		}), false, true, "Undelivered to work: build report",
			[]string{"refused", "sender not accepted"}, []string{"Last error"}},
		{"unconfirmed, peer sent receipts before", with(func(r *Row) {
			r.State, r.Reason, r.Relay, r.Epoch, r.Seq = StateUnconfirmed, "no delivery receipt by …", "https://relay.example", "E1", 12
			r.AcceptedAt = t0
		}), false, true, "Undelivered/unconfirmed to work: build report",
			[]string{"probably not delivered", "https://relay.example (epoch E1, seq 12, accepted 2026-10-02T10:00:00.000Z)"}, []string{"0.5.3"}},
		{"unconfirmed, older peer", with(func(r *Row) { r.State, r.Reason = StateUnconfirmed, "no delivery receipt" }),
			true, true, "Undelivered/unconfirmed to work: build report",
			[]string{"older than 0.5.3", "no delivery confirmation"}, []string{"probably not delivered"}},
		{"no subject", with(func(r *Row) { r.State, r.Subject, r.Reason = StateExpired, "", "x" }),
			false, true, "Undelivered to work: (no subject)", nil, nil},
		{"receipt", with(func(r *Row) { r.State, r.Kind = StateExpired, KindReceipt }), false, false, "", nil, nil},
		{"no agent", with(func(r *Row) { r.State, r.Agent = StateExpired, "" }), false, false, "", nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, ok := AlertFor(tt.r, tt.neverHeard)
			if ok != tt.ok {
				t.Fatalf("ok = %v, want %v", ok, tt.ok)
			}
			if !ok {
				return
			}
			if a.Subject != tt.subject || a.Agent != "alice" {
				t.Errorf("alert = %q to %q, want %q to alice", a.Subject, a.Agent, tt.subject)
			}
			for _, s := range tt.bodyHas {
				if !strings.Contains(a.Body, s) {
					t.Errorf("body lacks %q:\n%s", s, a.Body)
				}
			}
			for _, s := range tt.bodyHasNone {
				if strings.Contains(a.Body, s) {
					t.Errorf("body has %q:\n%s", s, a.Body)
				}
			}
		})
	}
}

func TestAlertSubjectFitsEnvelope(t *testing.T) {
	r := Row{Kind: KindEnvelope, Agent: "a", Host: strings.Repeat("h", 63), State: StateExpired,
		Subject: strings.Repeat("é", 200), Reason: "x", EndedAt: t0.Add(time.Hour)}
	a, ok := AlertFor(r, false)
	if !ok {
		t.Fatal("no alert")
	}
	if n := utf8.RuneCountInString(a.Subject); n != maxAlertSubject || !strings.HasSuffix(a.Subject, "…") {
		t.Errorf("subject is %d characters (%q), want %d ending in …", n, a.Subject, maxAlertSubject)
	}
}
