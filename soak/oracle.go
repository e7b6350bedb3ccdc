package soak

import (
	"fmt"
	"strings"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/internal/oracle"
)

// Copies is the oracle's view of a mailbox's listing: each copy's id, state and delivery count.
func Copies(msgs []api.Message) []oracle.Copy {
	out := make([]oracle.Copy, 0, len(msgs))
	for _, m := range msgs {
		out = append(out, oracle.Copy{ID: m.ID, State: m.State, Deliveries: m.Deliveries})
	}
	return out
}

// Unsettled lists the outbox rows of one host that are not settled: a row is settled when it
// is done, or ended (expired, unconfirmed, rejected) with a reason and an alert to its sender
// that names the message (alerts holds the bodies of the alerts in the senders' mailboxes).
func Unsettled(rows []api.OutboxRow, alerts []string) []string {
	var out []string
	for _, r := range rows {
		switch r.State {
		case "done":
			continue
		case "pending", "relay-accepted":
			out = append(out, fmt.Sprintf("%s to %s is still %s (attempts %d, last error %q)", r.MsgID, r.Host, r.State, r.Attempts, r.LastError))
		default:
			if r.Reason == "" || !mentioned(alerts, r.MsgID) {
				out = append(out, fmt.Sprintf("%s to %s ended %s (reason %q) without an alert naming it", r.MsgID, r.Host, r.State, r.Reason))
			}
		}
	}
	return out
}

func mentioned(bodies []string, id string) bool {
	for _, b := range bodies {
		if strings.Contains(b, id) {
			return true
		}
	}
	return false
}

// SeqsUnique checks the relay's sequence numbers as the outbox rows record them (every host's
// rows; a row holds the seq of the relay's accept statement): per target host, no two rows share
// a seq, in any epoch (a restore keeps the seq floor, so a seq is never handed out twice). Rows
// without a seq (LAN deliveries, never accepted) are skipped. It returns the violations.
//
// The rows cannot show that seqs grow: a row's acceptance time is read when the relay takes the
// push, before its transaction, so two pushes to one target from different senders can be
// stamped in one order and committed (and sequenced) in the other. The simulation, which serves
// one request at a time, checks the growth on the wire.
func SeqsUnique(rows []api.OutboxRow) []string {
	type seqKey struct {
		target string
		seq    int64
	}
	first := map[seqKey]api.OutboxRow{}
	var out []string
	for _, r := range rows {
		if r.Seq <= 0 {
			continue
		}
		k := seqKey{r.Host, r.Seq}
		if p, ok := first[k]; ok {
			out = append(out, fmt.Sprintf("%s %s and %s %s to %s share seq %d", p.Kind, p.MsgID, r.Kind, r.MsgID, r.Host, r.Seq))
			continue
		}
		first[k] = r
	}
	return out
}

// Line is the soak's one summary line.
func Line(seed uint64, t oracle.Tally, relayKills, hostKills int, lostResponses int64, restores int, seconds float64) string {
	return fmt.Sprintf("soak: seed=%d messages=%d delivered=%d lost=%d duplicated=%d went_back=%d relay_kills=%d host_kills=%d lost_responses=%d restores=%d seconds=%.0f",
		seed, t.Messages, t.Delivered, t.Lost, t.Duplicated, t.WentBack, relayKills, hostKills, lostResponses, restores, seconds)
}
