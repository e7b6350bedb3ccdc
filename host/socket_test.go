package host

import (
	"context"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/client"
)

// TestPairingThroughDaemonSockets pairs two running daemons through their control sockets only,
// as `agentmbx pair` and `agentmbx join` do while a daemon holds the store.
func TestPairingThroughDaemonSockets(t *testing.T) {
	a, b := startDaemon(t, "alpha"), startDaemon(t, "beta")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ca := dialDaemon(t, a.home)
	cb := dialDaemon(t, b.home)

	token, err := ca.StartPairing(ctx, 0)
	if err != nil {
		t.Fatalf("StartPairing over the socket: %v", err)
	}
	js, err := cb.JoinPairing(ctx, a.record(t).Addr, token)
	if err != nil {
		t.Fatalf("JoinPairing over the socket: %v", err)
	}
	if js.State != api.PairCode || len(js.Code) != 6 || js.Peer == nil || js.Peer.Host != "alpha" {
		t.Fatalf("joiner state = %+v, want a code for alpha", js)
	}
	is, err := ca.PairingStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if is.State != api.PairCode || is.Code != js.Code {
		t.Fatalf("inviter state = %+v, want the joiner's code %s", is, js.Code)
	}
	type confirmed struct {
		peer api.Peer
		err  error
	}
	inv := make(chan confirmed, 1)
	go func() {
		p, err := ca.ConfirmPairing(ctx, true)
		inv <- confirmed{p, err}
	}()
	pb, err := cb.ConfirmPairing(ctx, true)
	if err != nil {
		t.Fatalf("joiner confirm: %v", err)
	}
	pa := <-inv
	if pa.err != nil {
		t.Fatalf("inviter confirm: %v", pa.err)
	}
	if pb.Host != "alpha" || pa.peer.Host != "beta" {
		t.Fatalf("confirm returned %+v and %+v", pb, pa.peer)
	}
	for _, c := range []struct {
		cl   *client.Client
		want string
		key  string
	}{{ca, "beta", b.h.Key().PublicKey()}, {cb, "alpha", a.h.Key().PublicKey()}} {
		ps, err := c.cl.Peers(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(ps) != 1 || ps[0].Host != c.want || ps[0].HostPubkey != c.key {
			t.Errorf("peers = %+v, want %s pinned by its key", ps, c.want)
		}
	}
}
