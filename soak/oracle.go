package soak

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/agentmbx/agentmbx/api"
)

// Sent is one message the soak sent and the mailboxes it must reach, each exactly once.
type Sent struct {
	ID   string
	From Mailbox
	To   []Mailbox
}

// Tally is the oracle's count. Messages counts sends; Delivered the sends found exactly once
// in every intended mailbox; Lost and Duplicated count mailbox copies (missing, and extra);
// Misdelivered counts copies in a mailbox the message was not meant for.
type Tally struct {
	Messages, Delivered, Lost, Duplicated, Misdelivered int
	// Problems names the first few lost, duplicated and misdelivered copies.
	Problems []string
}

// OK reports whether every message arrived exactly once where it should, and nowhere else.
func (t Tally) OK() bool {
	return t.Lost == 0 && t.Duplicated == 0 && t.Misdelivered == 0 && t.Delivered == t.Messages
}

const maxProblems = 20

func (t *Tally) problem(format string, args ...any) {
	if len(t.Problems) < maxProblems {
		t.Problems = append(t.Problems, fmt.Sprintf(format, args...))
	}
}

// Count checks the mailboxes (the message ids each holds, one entry per copy) against sent.
// Ids in a mailbox that the soak did not send (alerts, for one) are not counted.
func Count(sent []Sent, boxes map[Mailbox][]string) Tally {
	copies := map[Mailbox]map[string]int{}
	for m, ids := range boxes {
		copies[m] = map[string]int{}
		for _, id := range ids {
			copies[m][id]++
		}
	}
	t := Tally{Messages: len(sent)}
	for _, s := range sent {
		whole := true
		meant := map[Mailbox]bool{}
		for _, m := range s.To {
			meant[m] = true
			switch n := copies[m][s.ID]; {
			case n == 0:
				t.Lost++
				whole = false
				t.problem("lost: %s from %s never reached %s", s.ID, s.From, m)
			case n > 1:
				t.Duplicated += n - 1
				whole = false
				t.problem("duplicated: %s from %s is in %s %d times", s.ID, s.From, m, n)
			}
		}
		for m, c := range copies {
			if c[s.ID] > 0 && !meant[m] {
				t.Misdelivered += c[s.ID]
				whole = false
				t.problem("misdelivered: %s from %s reached %s", s.ID, s.From, m)
			}
		}
		if whole {
			t.Delivered++
		}
	}
	return t
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

// SeqsGrow checks that the relay's sequence numbers per target only grow, as the outbox rows
// record them (every host's rows; a row holds the seq and the acceptance time of the relay's
// accept statement): for each target host, a row the relay accepted later has a higher seq, and
// no two rows share a seq. Rows without a seq (LAN deliveries, never accepted) are skipped. It
// returns the violations.
func SeqsGrow(rows []api.OutboxRow) []string {
	type acc struct {
		at  time.Time
		seq int64
		id  string
	}
	byTarget := map[string][]acc{}
	var out []string
	for _, r := range rows {
		if r.Seq <= 0 || r.AcceptedAt == "" {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, r.AcceptedAt)
		if err != nil {
			out = append(out, fmt.Sprintf("%s to %s: accepted_at %q is not a time", r.MsgID, r.Host, r.AcceptedAt))
			continue
		}
		byTarget[r.Host] = append(byTarget[r.Host], acc{at, r.Seq, r.MsgID})
	}
	targets := make([]string, 0, len(byTarget))
	for t := range byTarget {
		targets = append(targets, t)
	}
	sort.Strings(targets)
	for _, t := range targets {
		as := byTarget[t]
		sort.Slice(as, func(i, j int) bool {
			if !as[i].at.Equal(as[j].at) {
				return as[i].at.Before(as[j].at)
			}
			return as[i].seq < as[j].seq
		})
		for i := 1; i < len(as); i++ {
			p, c := as[i-1], as[i]
			switch {
			case c.seq == p.seq:
				out = append(out, fmt.Sprintf("%s and %s to %s share seq %d", p.id, c.id, t, c.seq))
			case c.seq < p.seq:
				out = append(out, fmt.Sprintf("seq went back for %s: %s accepted at %s got seq %d, below %d of %s accepted at %s",
					t, c.id, c.at.Format(time.RFC3339Nano), c.seq, p.seq, p.id, p.at.Format(time.RFC3339Nano)))
			}
		}
	}
	return out
}

// Line is the soak's one summary line.
func Line(seed uint64, t Tally, relayKills, hostKills int, lostResponses int64, restores int, seconds float64) string {
	return fmt.Sprintf("soak: seed=%d messages=%d delivered=%d lost=%d duplicated=%d relay_kills=%d host_kills=%d lost_responses=%d restores=%d seconds=%.0f",
		seed, t.Messages, t.Delivered, t.Lost, t.Duplicated, relayKills, hostKills, lostResponses, restores, seconds)
}
