package host

import (
	"errors"
	"fmt"
	"net"
	"net/http"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/host/control"
	"github.com/agentmbx/agentmbx/pairing"
)

// controlHandler is the control socket's HTTP handler (package control) for this host: its
// api.Service, its LAN pairing sessions (so `agentmbx pair` and `join` work while the daemon
// holds the store) and the relay routes (api.RelayService, which the handler finds on the Host).
func controlHandler(h *Host) http.Handler {
	return h.ops.Handler(control.NewHandler(h.Service(), h.pair)) // plus /healthz and /readyz (package host/ops)
}

// Pairing is the host's LAN pairing (package pairing): its routes are served on the LAN server,
// so the daemon's, or a listener serving LANMux while the session runs, must be up.
func (h *Host) Pairing() api.PairingService { return h.pair }

func (h *Host) newPairing() *pairing.Service {
	return pairing.New(pairing.Config{Identity: h, Pins: pairPins{h}, Mux: h.LANMux(), HTTPClient: h.client,
		Clock: h.clock, Rand: h.rand, Logger: h.log, AdvertiseAddr: h.pairAdvertiseAddr})
}

// pairAdvertiseAddr is the LAN address the joiner asks the inviter to use: the daemon's bound
// port when it runs, else the configured listen address, else the default port. An empty or
// unspecified host part is filled in by the inviter with the address the join came from.
func (h *Host) pairAdvertiseAddr() string {
	port, listen := h.lanPortHint(), h.ListenAddr()
	host, lport := "", fmt.Sprint(DefaultPort)
	if listen != "" {
		if hh, pp, err := net.SplitHostPort(listen); err == nil {
			host, lport = hh, pp
		}
	}
	if port > 0 {
		lport = fmt.Sprint(port)
	}
	return net.JoinHostPort(host, lport)
}

// pairPins is the host's peer store as pairing.Pinner.
type pairPins struct{ h *Host }

func (p pairPins) PinnedKey(name string) (string, error) {
	rec, err := p.h.peerRecord(name)
	if errors.Is(err, api.ErrUnpaired) {
		return "", nil
	}
	return rec.HostPubkey, err
}

func (p pairPins) PinnedName(key string) (string, error) {
	rec, err := p.h.peerByKey(key)
	if errors.Is(err, api.ErrUnpaired) {
		return "", nil
	}
	return rec.Host, err
}

func (p pairPins) Pin(pe api.Peer) error {
	err := p.h.PinPeer(PeerRecord{Host: pe.Host, HostPubkey: pe.HostPubkey, EncPub: pe.EncPub, Addr: pe.Addr})
	if errors.Is(err, api.ErrPeerKeyMismatch) || errors.Is(err, api.ErrPeerKeyInUse) || errors.Is(err, api.ErrSelf) {
		return fmt.Errorf("%w: %w", api.ErrPairConflict, err)
	}
	return err
}
