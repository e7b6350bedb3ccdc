package soak

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/agentmbx/agentmbx/api"
)

func mb(s string) Mailbox {
	a, h, _ := strings.Cut(s, "@")
	return Mailbox{h, a}
}

func TestRecipientsFollowAgentmbxAddressing(t *testing.T) {
	hosts := Topology(3)
	tests := []struct{ from, agent, to, want string }{
		{"h1", "rev1", "dev2@h2", "dev2@h2"},
		{"h1", "rev1", "dev1@h1", "dev1@h1"},
		{"h1", "rev1", "ops", "ops@h1 ops@h2 ops@h3"},
		{"h2", "rev2", "role:reviewer", "rev1@h1 rev3@h3"},
		{"h2", "dev2", "role:reviewer", "rev1@h1 rev2@h2 rev3@h3"},
		{"h3", "dev3", "*", "dev1@h1 ops@h1 rev1@h1 dev2@h2 ops@h2 rev2@h2 ops@h3 rev3@h3"},
	}
	for _, tt := range tests {
		var got []string
		for _, m := range Recipients(hosts, tt.from, tt.agent, tt.to) {
			got = append(got, m.String())
		}
		if strings.Join(got, " ") != tt.want {
			t.Errorf("%s@%s to %s: %v, want %s", tt.agent, tt.from, tt.to, got, tt.want)
		}
	}
}

// Pick never sends from the shared agent nor to the sender alone, and draws every kind.
func TestPickDrawsEveryKindOfAddress(t *testing.T) {
	hosts := Topology(3)
	rng := rand.New(rand.NewPCG(1, 2))
	kinds := map[string]int{}
	for range 500 {
		from, agent, to := Pick(rng, hosts)
		if agent == Shared || to == agent+"@"+hosts[from].Name {
			t.Fatalf("picked %s@%s to %s", agent, hosts[from].Name, to)
		}
		if len(Recipients(hosts, hosts[from].Name, agent, to)) == 0 {
			t.Fatalf("%s@%s to %s reaches nobody", agent, hosts[from].Name, to)
		}
		switch {
		case to == "*", to == Shared, strings.HasPrefix(to, "role:"):
			kinds[to]++
		case strings.HasSuffix(to, "@"+hosts[from].Name):
			kinds["local"]++
		default:
			kinds["remote"]++
		}
	}
	if len(kinds) != 5 {
		t.Fatalf("kinds drawn: %v", kinds)
	}
}

func TestCountFindsLossDuplicationAndMisdelivery(t *testing.T) {
	sent := []Sent{
		{ID: "a", To: []Mailbox{mb("x@h1"), mb("y@h2")}},
		{ID: "b", To: []Mailbox{mb("x@h1")}},
		{ID: "c", To: []Mailbox{mb("y@h2")}},
	}
	tests := []struct {
		name  string
		boxes map[Mailbox][]string
		want  Tally
	}{
		{"all once", map[Mailbox][]string{mb("x@h1"): {"a", "b", "alert-id"}, mb("y@h2"): {"a", "c"}},
			Tally{Messages: 3, Delivered: 3}},
		{"one copy lost", map[Mailbox][]string{mb("x@h1"): {"a", "b"}, mb("y@h2"): {"c"}},
			Tally{Messages: 3, Delivered: 2, Lost: 1}},
		{"one twice", map[Mailbox][]string{mb("x@h1"): {"a", "b", "b"}, mb("y@h2"): {"a", "c"}},
			Tally{Messages: 3, Delivered: 2, Duplicated: 1}},
		{"one in the wrong box", map[Mailbox][]string{mb("x@h1"): {"a", "b", "c"}, mb("y@h2"): {"a", "c"}},
			Tally{Messages: 3, Delivered: 2, Misdelivered: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Count(sent, tt.boxes)
			problems := got.Problems
			got.Problems = nil
			if got.Messages != tt.want.Messages || got.Delivered != tt.want.Delivered || got.Lost != tt.want.Lost ||
				got.Duplicated != tt.want.Duplicated || got.Misdelivered != tt.want.Misdelivered {
				t.Fatalf("Count = %+v, want %+v", got, tt.want)
			}
			if got.OK() != (tt.name == "all once") || (len(problems) == 0) != got.OK() {
				t.Fatalf("OK %v with problems %v", got.OK(), problems)
			}
		})
	}
}

func TestUnsettledRows(t *testing.T) {
	rows := []api.OutboxRow{
		{MsgID: "done1", State: "done"},
		{MsgID: "wait1", State: "relay-accepted"},
		{MsgID: "pend1", State: "pending"},
		{MsgID: "exp1", State: "expired", Reason: "deadline passed"},
		{MsgID: "exp2", State: "expired", Reason: "deadline passed"},
		{MsgID: "rej1", State: "rejected"},
	}
	got := Unsettled(rows, []string{"Your message exp1 to h2 was not delivered", "Your message rej1 ..."})
	var ids []string
	for _, u := range got {
		ids = append(ids, strings.Fields(u)[0])
	}
	if want := []string{"wait1", "pend1", "exp2", "rej1"}; !slices.Equal(ids, want) {
		t.Fatalf("unsettled %v, want %v (%q)", ids, want, got)
	}
}

func TestLine(t *testing.T) {
	got := Line(5, Tally{Messages: 9, Delivered: 9}, 3, 4, 11, 1, 61.4)
	want := "soak: seed=5 messages=9 delivered=9 lost=0 duplicated=0 relay_kills=3 host_kills=4 lost_responses=11 restores=1 seconds=61"
	if got != want {
		t.Fatalf("Line = %q, want %q", got, want)
	}
}

func TestSeqsGrowPerTarget(t *testing.T) {
	row := func(id, host string, seq int64, at string) api.OutboxRow {
		return api.OutboxRow{MsgID: id, Host: host, Seq: seq, AcceptedAt: at}
	}
	good := []api.OutboxRow{
		row("m3", "h2", 30, "2026-10-02T10:00:03.000Z"),
		row("m1", "h2", 10, "2026-10-02T10:00:01.000Z"),
		row("m2", "h2", 11, "2026-10-02T10:00:01.000Z"), // same ms: seq order decides
		row("m1", "h3", 5, "2026-10-02T10:00:09.000Z"),  // another target counts apart
		{MsgID: "m9", Host: "h2"},                       // over the LAN: no seq
	}
	if got := SeqsGrow(good); len(got) != 0 {
		t.Fatalf("SeqsGrow(growing seqs) = %q, want none", got)
	}
	back := append(good, row("m4", "h2", 29, "2026-10-02T10:00:04.000Z"))
	if got := SeqsGrow(back); len(got) != 1 || !strings.Contains(got[0], "seq went back for h2: m4") {
		t.Fatalf("SeqsGrow(a seq below an earlier one) = %q, want m4 named", got)
	}
	shared := append(good, row("m5", "h2", 30, "2026-10-02T10:00:05.000Z"))
	if got := SeqsGrow(shared); len(got) != 1 || !strings.Contains(got[0], "share seq 30") {
		t.Fatalf("SeqsGrow(a reused seq) = %q, want the shared seq named", got)
	}
	bad := []api.OutboxRow{row("m6", "h2", 1, "yesterday")}
	if got := SeqsGrow(bad); len(got) != 1 {
		t.Fatalf("SeqsGrow(an unreadable time) = %q, want one problem", got)
	}
}
