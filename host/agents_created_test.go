package host

import (
	"context"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/api"
)

// TestAgentCreatedByIncomingMail: mail from a peer for a name beta never registered is kept in a
// new mailbox, and the agent says which mail created it; local agents (registered, or created by
// local mail) carry no mark, and agents add adopts the created one.
func TestAgentCreatedByIncomingMail(t *testing.T) {
	a, b := startDaemon(t, "alpha"), startDaemon(t, "beta")
	if err := a.h.PinPeer(b.record(t)); err != nil {
		t.Fatal(err)
	}
	if err := b.h.PinPeer(a.record(t)); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ca := dialDaemon(t, a.home)
	cb := dialDaemon(t, b.home)
	if _, err := cb.AddAgent(ctx, api.Agent{Name: "bob"}); err != nil {
		t.Fatal(err)
	}
	if _, err := cb.Send(ctx, api.SendRequest{From: "bob", To: []string{"carol@beta"}, Body: "local"}); err != nil {
		t.Fatal(err)
	}
	res, err := ca.Send(ctx, api.SendRequest{From: "ann", To: []string{"bobb@beta"}, Body: "a typo"})
	if err != nil {
		t.Fatal(err)
	}
	ms, err := cb.Wait(ctx, "bobb", time.Minute)
	if err != nil || len(ms) != 1 || ms[0].ID != res.ID {
		t.Fatalf("bobb's mail = %+v, %v", ms, err)
	}
	want := map[string]string{"bob": "", "carol": "", "bobb": "ann@alpha"}
	as, err := cb.Agents(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(as) != len(want) {
		t.Fatalf("beta's agents = %+v", as)
	}
	for _, ag := range as {
		if by, ok := want[ag.Name]; !ok || ag.CreatedByMail != by {
			t.Errorf("agent %s created by mail %q, want %q", ag.Name, ag.CreatedByMail, by)
		}
	}
	if _, err := cb.AddAgent(ctx, api.Agent{Name: "bobb"}); err != nil {
		t.Fatal(err)
	}
	as, err = cb.Agents(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, ag := range as {
		if ag.CreatedByMail != "" {
			t.Errorf("after agents add, %s is still marked created by %q", ag.Name, ag.CreatedByMail)
		}
	}
}
