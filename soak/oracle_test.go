package soak

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/internal/oracle"
)

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
	got := Line(5, oracle.Tally{Messages: 9, Delivered: 9, WentBack: 2}, 3, 4, 11, 1, 61.4)
	want := "soak: seed=5 messages=9 delivered=9 lost=0 duplicated=0 went_back=2 relay_kills=3 host_kills=4 lost_responses=11 restores=1 seconds=61"
	if got != want {
		t.Fatalf("Line = %q, want %q", got, want)
	}
}

func TestSeqsUniquePerTarget(t *testing.T) {
	row := func(id, host string, seq int64) api.OutboxRow {
		return api.OutboxRow{MsgID: id, Host: host, Kind: "envelope", Seq: seq}
	}
	good := []api.OutboxRow{
		row("m3", "h2", 30),
		row("m1", "h2", 10),
		row("m2", "h2", 11),
		row("m1", "h3", 10),       // another target counts apart
		{MsgID: "m9", Host: "h2"}, // over the LAN: no seq
		{MsgID: "m8", Host: "h2"},
	}
	if got := SeqsUnique(good); len(got) != 0 {
		t.Fatalf("SeqsUnique(distinct seqs) = %q, want none", got)
	}
	shared := append(good, api.OutboxRow{MsgID: "m1", Host: "h2", Kind: "receipt", Seq: 30})
	if got := SeqsUnique(shared); len(got) != 1 || !strings.Contains(got[0], "envelope m3 and receipt m1 to h2 share seq 30") {
		t.Fatalf("SeqsUnique(a reused seq) = %q, want both rows named", got)
	}
}
