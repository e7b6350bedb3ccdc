package host

import (
	"context"
	"net/http"
	"time"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/host/control"
)

// controlHandler is the control socket's HTTP handler (package control) for this host: its
// api.Service, its LAN pairing sessions (so `agentmbx pair` and `join` work while the daemon
// holds the store) and the relay routes (api.RelayService, which the handler finds on the Host).
func controlHandler(h *Host) http.Handler {
	return control.NewHandler(h, h.Pairing())
}

// Pairing is the host's LAN pairing as an api.PairingService.
func (h *Host) Pairing() api.PairingService { return hostPairing{h} }

type hostPairing struct{ h *Host }

func (p hostPairing) StartPairing(_ context.Context, ttl time.Duration) (string, error) {
	return p.h.StartPairing(ttl)
}

func (p hostPairing) PairingStatus(context.Context) (api.PairingState, error) {
	return p.h.PairingStatus()
}

func (p hostPairing) WaitPairing(ctx context.Context, from api.PairState) (api.PairingState, error) {
	return p.h.WaitPairing(ctx, from)
}

func (p hostPairing) JoinPairing(ctx context.Context, addr, token string) (api.PairingState, error) {
	return p.h.JoinPairing(ctx, addr, token)
}

func (p hostPairing) ConfirmPairing(ctx context.Context, accept bool) (api.Peer, error) {
	return p.h.ConfirmPairing(ctx, accept)
}

func (p hostPairing) CancelPairing(ctx context.Context) error { return p.h.CancelPairing(ctx) }
