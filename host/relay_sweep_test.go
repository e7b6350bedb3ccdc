package host

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/outbox"
)

// TestRelaySweepNoticeEndsTheRow: end to end, the relay's own retention sweep expires an
// envelope its target never pulled, and the sender's next pull takes the relay's notice: the
// relay-accepted row ends expired and the local sender is alerted.
func TestRelaySweepNoticeEndsTheRow(t *testing.T) {
	a, _, r := relayPair(t, mbx.Limits{})
	res := a.send("alice", []string{"bob@beta"}, "will expire", "beta never pulls")
	a.passOnce()
	if s := a.rowState(res.ID, "beta"); s != outbox.StateRelayAccepted {
		t.Fatalf("row after the push = %s, want relay-accepted", s)
	}
	a.clock.Advance(time.Duration(mbx.DefaultRetentionDays) * 24 * time.Hour)
	rep, err := r.cur.Load().srv.Sweep(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Expired.Envelope != 1 || rep.Notices != 1 {
		t.Fatalf("sweep = %+v, want one envelope expired and noticed", rep)
	}
	a.pull()
	row := a.row(res.ID, "beta")
	if row.State != outbox.StateExpired || !strings.Contains(row.Reason, "relay dropped it") {
		t.Fatalf("row = %s (%q), want expired", row.State, row.Reason)
	}
	al := a.alerts("alice")
	if len(al) != 1 || !strings.HasPrefix(al[0].Subject, "Undelivered to beta: will expire") {
		t.Fatalf("alerts = %+v", al)
	}
}
