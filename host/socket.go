package host

import (
	"net/http"

	"github.com/agentmbx/agentmbx/client"
)

// controlHandler is the control socket's HTTP handler: the client package owns both ends of that
// wire, and serves any api.Service.
func controlHandler(h *Host) http.Handler { return client.NewHandler(h) }
