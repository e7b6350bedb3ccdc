// Package oracle is the check the demo, the soak and the simulation end with: every message sent
// is in each mailbox it was meant for exactly once and nowhere else, and no copy ever went back
// to an earlier state.
//
// "Exactly once" counts deliveries, not rows. A mailbox holds one row per agent and message id,
// so a message delivered twice still lists once; what shows a second delivery is the copy's
// delivery count ("deliveries" in inbox --json, kept by the host in the transaction that puts the
// copy in the mailbox) and the copy's state: a re-delivery puts the copy back in state delivered, so
// an agent would see mail it had read as unread and act on it twice. Count adds up the delivery
// counts; a Watch remembers the furthest state each copy was seen in (or moved to by the test
// itself) and reports any copy seen in an earlier one later.
//
// Each oracle's self-test runs its whole scenario with the host failpoint that turns the dedup
// off (host.skip-dedup, mailstore.FailSkipDedup) and requires the oracle to report a duplicate.
package oracle

import "fmt"

// Mailbox is an agent on a host.
type Mailbox struct{ Host, Agent string }

func (m Mailbox) String() string { return m.Agent + "@" + m.Host }

// Sent is one message a scenario sent and the mailboxes it must reach, each exactly once.
type Sent struct {
	ID   string
	From Mailbox
	To   []Mailbox
}

// Copy is one row of a mailbox as the host lists it (inbox --all --json: id, state, deliveries).
type Copy struct {
	ID    string
	State string // delivered, notified, read, acked
	// Deliveries is how many times the host put the copy in the mailbox.
	Deliveries int
}

// states ranks the states of a copy in the order a copy may move (the documented order, written
// here rather than taken from the implementation the oracle checks).
var states = map[string]int{"delivered": 1, "notified": 2, "read": 3, "acked": 4}

// Tally is the oracle's count. Messages counts sends; Delivered the sends delivered exactly once
// to every intended mailbox and nowhere else; Lost counts copies missing, Duplicated deliveries
// beyond the first (a second row, or a delivery count above 1), Misdelivered copies in a mailbox
// the message was not meant for, Uncounted copies that show no delivery count (a host that does
// not count would make Duplicated blind), and WentBack copies seen in an earlier state than
// before.
type Tally struct {
	Messages, Delivered, Lost, Duplicated, Misdelivered, Uncounted, WentBack int
	// Problems names the first few problems of each kind.
	Problems []string
}

// OK reports whether every message arrived exactly once where it should, nowhere else, and no
// copy went back.
func (t Tally) OK() bool {
	return t.Lost == 0 && t.Duplicated == 0 && t.Misdelivered == 0 && t.Uncounted == 0 && t.WentBack == 0 &&
		t.Delivered == t.Messages
}

// MaxProblems bounds Tally.Problems.
const MaxProblems = 20

func (t *Tally) problem(format string, args ...any) {
	if len(t.Problems) < MaxProblems {
		t.Problems = append(t.Problems, fmt.Sprintf(format, args...))
	}
}

// Count checks the mailboxes (every copy each holds) against sent, and has watch (when not nil)
// look at every copy first: its WentBack and problems are the watch's, over every look so far.
// Copies of ids that were not sent (alerts, for one) are watched but not counted.
func Count(sent []Sent, boxes map[Mailbox][]Copy, watch *Watch) Tally {
	t := Tally{Messages: len(sent)}
	if watch != nil {
		watch.Look(boxes)
		t.WentBack = len(watch.wentBack)
		for _, p := range watch.wentBack {
			t.problem("%s", p)
		}
	}
	ours := map[string]bool{}
	for _, s := range sent {
		ours[s.ID] = true
	}
	deliveries := map[Mailbox]map[string]int{}
	for m, copies := range boxes {
		deliveries[m] = map[string]int{}
		for _, c := range copies {
			if !ours[c.ID] {
				continue
			}
			n := c.Deliveries
			if n <= 0 {
				t.Uncounted++
				t.problem("uncounted: the copy of %s in %s shows no delivery count", c.ID, m)
				n = 1
			}
			deliveries[m][c.ID] += n
		}
	}
	for _, s := range sent {
		whole := true
		meant := map[Mailbox]bool{}
		for _, m := range s.To {
			meant[m] = true
			switch n := deliveries[m][s.ID]; {
			case n == 0:
				t.Lost++
				whole = false
				t.problem("lost: %s from %s never reached %s", s.ID, s.From, m)
			case n > 1:
				t.Duplicated += n - 1
				whole = false
				t.problem("duplicated: %s from %s was delivered to %s %d times", s.ID, s.From, m, n)
			}
		}
		for m, d := range deliveries {
			if d[s.ID] > 0 && !meant[m] {
				t.Misdelivered += d[s.ID]
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

// Watch remembers the furthest state each copy was in, and collects the copies later seen in an
// earlier state (each copy once). The zero Watch is ready to use; it is not safe for concurrent
// use.
type Watch struct {
	furthest map[Mailbox]map[string]string
	wentBack []string
	reported map[string]bool // mailbox ‖ id of the copies in wentBack
}

// Moved records that the scenario itself moved m's copy of id to state (a read or an ack that
// was answered): the copy may never be seen in an earlier state after it.
func (w *Watch) Moved(m Mailbox, id, state string) {
	w.see(m, id, state, "moved to")
}

// Look records the state of every copy in boxes, and a problem for each copy in an earlier state
// than the furthest it was seen in or moved to.
func (w *Watch) Look(boxes map[Mailbox][]Copy) {
	for m, copies := range boxes {
		for _, c := range copies {
			w.see(m, c.ID, c.State, "seen")
		}
	}
}

// WentBack lists the copies seen going back, in the order they were found, each once.
func (w *Watch) WentBack() []string { return w.wentBack }

func (w *Watch) see(m Mailbox, id, state, how string) {
	rank, ok := states[state]
	if !ok {
		w.report(m, id, fmt.Sprintf("unknown state: the copy of %s in %s is %q", id, m, state))
		return
	}
	if w.furthest == nil {
		w.furthest = map[Mailbox]map[string]string{}
	}
	if w.furthest[m] == nil {
		w.furthest[m] = map[string]string{}
	}
	prev := w.furthest[m][id]
	switch {
	case rank < states[prev]:
		w.report(m, id, fmt.Sprintf("went back: the copy of %s in %s was %s, then %s %s", id, m, prev, how, state))
	case rank > states[prev]:
		w.furthest[m][id] = state
	}
}

func (w *Watch) report(m Mailbox, id, problem string) {
	k := m.String() + "\x00" + id
	if w.reported[k] {
		return
	}
	if w.reported == nil {
		w.reported = map[string]bool{}
	}
	w.reported[k] = true
	w.wentBack = append(w.wentBack, problem)
}
