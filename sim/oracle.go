package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/internal/oracle"
	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/soak"
)

// The oracle: the soak's (every message delivered exactly once to every intended mailbox and no
// copy ever back to an earlier state, package internal/oracle; every sender row settled, nothing
// quarantined) plus the relay's sequence numbers, watched on the wire: per target
// they only grow, an item keeps the seq it was accepted with, and a page lists its items in seq
// order after the position asked for.

// seqOracle records every seq the relay hands out (push answers) and serves (pull pages), whether
// or not the answer then reaches its node.
type seqOracle struct {
	max  map[string]int64 // per target host key: the highest seq handed out
	item map[string]int64 // epoch|item id|target → the seq it was accepted with
}

func newSeqOracle() seqOracle {
	return seqOracle{max: map[string]int64{}, item: map[string]int64{}}
}

// observeRelay checks a relay answer just served.
func (w *world) observeRelay(m *message) {
	if m.code != http.StatusOK {
		return
	}
	u, err := url.Parse(m.url)
	if err != nil || u.Path != "/v2/relay/items" {
		return
	}
	epoch := w.relay.srv.Epoch()
	switch m.method {
	case http.MethodPost:
		var resp mbx.PushResponse
		if err := json.Unmarshal(m.rbody, &resp); err != nil {
			w.problemf("push answer %s is not JSON: %v", m, err)
			return
		}
		for _, r := range resp.Results {
			w.seqs.push(w, epoch, r)
		}
	case http.MethodGet:
		var page mbx.PullResponse
		if err := json.Unmarshal(m.rbody, &page); err != nil {
			w.problemf("pull answer %s is not JSON: %v", m, err)
			return
		}
		after, _ := strconv.ParseInt(u.Query().Get("after"), 10, 64)
		w.seqs.pull(w, w.host(m.from).key, after, page)
	}
}

func (s seqOracle) push(w *world, epoch string, r mbx.PushResult) {
	for _, t := range r.Targets {
		k := epoch + "|" + r.ItemID + "|" + t.HostPubkey
		switch r.Status {
		case mbx.StatusAccepted:
			if t.Seq <= s.max[t.HostPubkey] {
				w.problemf("seq went back: item %s accepted for %s at seq %d, after seq %d was handed out", r.ItemID, short(t.HostPubkey), t.Seq, s.max[t.HostPubkey])
			}
			if old, ok := s.item[k]; ok {
				w.problemf("item %s accepted twice in epoch %s for %s (seqs %d and %d)", r.ItemID, epoch, short(t.HostPubkey), old, t.Seq)
			}
			s.max[t.HostPubkey] = max(s.max[t.HostPubkey], t.Seq)
			s.item[k] = t.Seq
		case mbx.StatusDuplicate:
			if old, ok := s.item[k]; ok && old != t.Seq {
				w.problemf("duplicate of item %s for %s names seq %d, it was accepted at %d", r.ItemID, short(t.HostPubkey), t.Seq, old)
			}
		}
	}
}

func (s seqOracle) pull(w *world, target string, after int64, page mbx.PullResponse) {
	last := after
	for _, it := range page.Items {
		if it.Seq <= last {
			w.problemf("pull page for %s after %d lists seq %d after %d", short(target), after, it.Seq, last)
		}
		last = it.Seq
		if old, ok := s.item[page.Epoch+"|"+it.ItemID+"|"+target]; ok && old != it.Seq {
			w.problemf("item %s is served to %s at seq %d, it was accepted at %d", it.ItemID, short(target), it.Seq, old)
		}
	}
}

func short(key string) string { return mbx.Fingerprint(key) }

// check runs the soak's oracle on the quiescent world and returns its tally and problems.
func (w *world) check(topo []soak.Host) (oracle.Tally, []string, error) {
	ctx := context.Background()
	// The outbox rows first: listing a mailbox marks its copies notified, which queues receipts.
	rows := map[string][]api.OutboxRow{}
	var problems []string
	for _, sh := range w.hosts {
		rs, err := sh.h.Outbox(ctx)
		if err != nil {
			return oracle.Tally{}, nil, err
		}
		rows[sh.name] = rs
		q, err := sh.h.Relay().RelayQuarantine(ctx)
		if err != nil {
			return oracle.Tally{}, nil, err
		}
		for _, it := range q {
			problems = append(problems, fmt.Sprintf("%s: quarantined item %s from %s: %s (%s)", sh.name, it.ItemID, it.Host, it.Cause, it.Reason))
		}
	}
	boxes := map[oracle.Mailbox][]oracle.Copy{}
	var alerts []string
	for i, sh := range w.hosts {
		for _, a := range topo[i].Agents {
			msgs, err := sh.h.Service().Inbox(ctx, a.Name, true)
			if err != nil {
				return oracle.Tally{}, nil, err
			}
			mb := oracle.Mailbox{Host: sh.name, Agent: a.Name}
			boxes[mb] = soak.Copies(msgs)
			for _, m := range msgs {
				if m.Kind == string(mbx.KindAlert) {
					alerts = append(alerts, m.Body)
				}
			}
		}
	}
	tally := oracle.Count(w.sent, boxes, &w.watch)
	problems = append(problems, tally.Problems...)
	for _, sh := range w.hosts {
		for _, u := range soak.Unsettled(rows[sh.name], alerts) {
			problems = append(problems, sh.name+": "+u)
		}
	}
	var all []api.OutboxRow
	for _, sh := range w.hosts {
		all = append(all, rows[sh.name]...)
	}
	for _, p := range soak.SeqsUnique(all) {
		problems = append(problems, "relay seqs (outbox rows): "+p)
	}
	problems = append(problems, w.problems...)
	return tally, problems, nil
}

// unsettled counts the outbox rows still pending or relay-accepted on the hosts.
func (w *world) unsettled() (int, error) {
	n := 0
	for _, sh := range w.hosts {
		rows, err := sh.h.Outbox(context.Background())
		if err != nil {
			return 0, err
		}
		for _, r := range rows {
			if r.State == "pending" || r.State == "relay-accepted" {
				n++
			}
		}
	}
	return n, nil
}

func summarize(ps []string) string { return strings.Join(ps, "\n  ") }
