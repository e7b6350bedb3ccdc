package client_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/client"
)

// relayFake is the fake service with a relay side.
type relayFake struct {
	*fake
	set api.RelaySetRequest
}

func (f *relayFake) RelayStatus(context.Context) (api.RelayStatus, error) {
	return api.RelayStatus{Configured: f.set.URL != "", URL: f.set.URL, Problems: []api.RelayProblem{{Op: "push", Error: "x", At: "t"}}}, nil
}

func (f *relayFake) RelaySet(_ context.Context, req api.RelaySetRequest) (api.RelayStatus, error) {
	if req.Key == "bad" {
		return api.RelayStatus{}, fmt.Errorf("relay set: %w", client.ErrConflict)
	}
	f.set = req
	return api.RelayStatus{Configured: true, URL: req.URL, TOFU: req.Key == ""}, nil
}

func (f *relayFake) RelayUnset(context.Context) (api.RelayStatus, error) {
	f.set = api.RelaySetRequest{}
	return api.RelayStatus{}, nil
}

func (f *relayFake) RelayQuarantine(context.Context) ([]api.QuarantineItem, error) {
	return []api.QuarantineItem{{Relay: f.set.URL, Seq: 7, ItemID: "i", Cause: "unpaired"}}, nil
}

func TestRelayRoutes(t *testing.T) {
	ctx := context.Background()
	c := dial(t, serve(t, &relayFake{fake: newFake()}))
	st, err := c.RelaySet(ctx, api.RelaySetRequest{URL: "https://relay.example"})
	if err != nil || !st.Configured || !st.TOFU || !st.Daemon || st.URL != "https://relay.example" {
		t.Fatalf("RelaySet = %+v, %v", st, err)
	}
	if _, err := c.RelaySet(ctx, api.RelaySetRequest{URL: "https://relay.example", Key: "bad"}); !errors.Is(err, client.ErrConflict) {
		t.Fatalf("RelaySet refused = %v, want ErrConflict", err)
	}
	st, err = c.RelayStatus(ctx)
	if err != nil || !st.Daemon || st.URL != "https://relay.example" || len(st.Problems) != 1 {
		t.Fatalf("RelayStatus = %+v, %v", st, err)
	}
	q, err := c.RelayQuarantine(ctx)
	if err != nil || len(q) != 1 || q[0].Seq != 7 || q[0].Relay != "https://relay.example" {
		t.Fatalf("RelayQuarantine = %+v, %v", q, err)
	}
	if st, err := c.RelayUnset(ctx); err != nil || st.Configured {
		t.Fatalf("RelayUnset = %+v, %v", st, err)
	}

	// A service without a relay side answers not found, with a hint.
	plain := dial(t, serve(t, newFake()))
	if _, err := plain.RelayStatus(ctx); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("RelayStatus on a service without a relay = %v, want ErrNotFound", err)
	}
}
