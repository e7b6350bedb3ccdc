package doctor

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/mbx"
)

// Outbox row states, as api.OutboxRow names them.
const (
	statePending       = "pending"
	stateRelayAccepted = "relay-accepted"
	stateExpired       = "expired"
	stateUnconfirmed   = "unconfirmed"
	stateRejected      = "rejected"
)

// checkOutbox: rows by state, the oldest pending row and why it waits, and the rows that ended
// undelivered since the last doctor.
func checkOutbox(ctx context.Context, env Env, last time.Time, r *Report) {
	rows, err := env.Host.Outbox(ctx)
	if err != nil {
		r.add(Check{ID: "outbox", Status: Fail, Summary: "outbox unreadable: " + err.Error()})
		return
	}
	byState := map[string]int{}
	var pending []api.OutboxRow
	for _, row := range rows {
		byState[row.State]++
		if row.State == statePending {
			pending = append(pending, row)
		}
	}
	c := Check{ID: "outbox", Status: OK, Summary: countStates(byState)}
	if len(rows) == 0 {
		c.Summary = "empty"
	}
	if len(pending) > 0 {
		slices.SortFunc(pending, func(a, b api.OutboxRow) int { return strings.Compare(a.MsgID, b.MsgID) })
		c.Detail = "oldest pending: " + whyWaits(pending[0], env.Now())
		if age := env.Now().Sub(ulidTime(pending[0].MsgID)); age > time.Hour && !ulidTime(pending[0].MsgID).IsZero() {
			c.Status = Warn
			c.Summary += fmt.Sprintf("; the oldest pending row waits for %s", age.Round(time.Minute))
			c.Fix = env.command("sent", pending[0].MsgID)
		}
	}
	r.add(c)
	checkEnded(env, rows, last, r)
}

// whyWaits says where a pending row stands: its target, attempts, next try and last error.
func whyWaits(row api.OutboxRow, now time.Time) string {
	s := fmt.Sprintf("%s %s to %s", row.Kind, row.MsgID, row.Host)
	if t := ulidTime(row.MsgID); !t.IsZero() {
		s += fmt.Sprintf(", queued %s ago", now.Sub(t).Round(time.Second))
	}
	if row.Attempts == 0 {
		return s + ", not attempted yet"
	}
	s += fmt.Sprintf(", %d attempts", row.Attempts)
	if row.NextAt != "" {
		s += ", next " + row.NextAt
	}
	if row.LastError != "" {
		s += ", last error: " + row.LastError
	}
	return s
}

// checkEnded: rows that ended unconfirmed, expired or rejected since the last doctor (warn).
func checkEnded(env Env, rows []api.OutboxRow, last time.Time, r *Report) {
	var ended []api.OutboxRow
	for _, row := range rows {
		switch row.State {
		case stateExpired, stateUnconfirmed, stateRejected:
		default:
			continue
		}
		at, err := mbx.ParseISOTime(row.EndedAt)
		if err == nil && !at.After(last) {
			continue
		}
		ended = append(ended, row)
	}
	since := "since the last doctor (" + mbx.ISOTime(last) + ")"
	if last.IsZero() {
		since = "(no earlier doctor run)"
	}
	if len(ended) == 0 {
		r.add(Check{ID: "outbox.ended", Status: OK, Summary: "no row ended undelivered " + since})
		return
	}
	byState := map[string]int{}
	var lines []string
	for _, row := range ended {
		byState[row.State]++
		lines = append(lines, fmt.Sprintf("%s %s to %s: %s %s", row.State, row.MsgID, row.Host, orText(row.Reason, row.LastError), row.EndedAt))
	}
	if len(lines) > 10 {
		lines = append(lines[:10], fmt.Sprintf("… and %d more (agentmbx outbox)", len(lines)-10))
	}
	r.add(Check{ID: "outbox.ended", Status: Warn, Summary: fmt.Sprintf("%s %s", countStates(byState), since),
		Detail: strings.Join(lines, "\n") + "\nthe senders also got an alert from mbx", Fix: env.command("sent", ended[0].MsgID)})
}

// countStates prints counts by state in a fixed order ("2 pending, 1 done").
func countStates(m map[string]int) string {
	order := []string{statePending, stateRelayAccepted, "done", stateUnconfirmed, stateExpired, stateRejected}
	var parts []string
	for _, s := range order {
		if m[s] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", m[s], s))
		}
	}
	for s, n := range m {
		if !slices.Contains(order, s) {
			parts = append(parts, fmt.Sprintf("%d %s", n, s))
		}
	}
	return strings.Join(parts, ", ")
}

// checkQuarantine: relay items this host refused.
func checkQuarantine(env Env, rs api.RelayStatus, r *Report) {
	if rs.Quarantined == 0 {
		r.add(Check{ID: "quarantine", Status: OK, Summary: "empty"})
		return
	}
	r.add(Check{ID: "quarantine", Status: Warn, Summary: fmt.Sprintf("%d relay items refused (kept, never dropped)", rs.Quarantined),
		Fix: env.command("relay", "quarantine")})
}

// ulidTime is the time in a ULID's first ten characters (zero when s is not a ULID).
func ulidTime(s string) time.Time {
	const alphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
	if !mbx.ValidULID(s) {
		return time.Time{}
	}
	var ms uint64
	for _, ch := range strings.ToUpper(s[:10]) {
		i := strings.IndexRune(alphabet, ch)
		if i < 0 {
			return time.Time{}
		}
		ms = ms<<5 | uint64(i)
	}
	return time.UnixMilli(int64(ms))
}
