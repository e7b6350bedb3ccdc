package host

import (
	"net/http"

	"github.com/agentmbx/agentmbx/client"
)

// controlHandler is the control socket's HTTP handler: the client package owns both ends of that
// wire and serves any api.Service. The daemon's Host also runs LAN pairing sessions there
// (client.WithPairing), so `agentmbx pair` and `join` work while it holds the store, and answers
// the relay routes (api.RelayService, which the handler finds on the Host).
func controlHandler(h *Host) http.Handler {
	return client.NewHandler(h, client.WithPairing[PairingState](h))
}
