package control

import (
	"net/http"

	"github.com/agentmbx/agentmbx/api"
)

var errNoOutbox = api.NewError(api.CodeNotFound, "this daemon cannot retry outbox rows",
	"the daemon may be of another version; compare `agentmbx version` with the daemon's")

func (h *handler) outboxRetry(w http.ResponseWriter, r *http.Request) (any, error) {
	os, ok := h.svc.(api.OutboxService)
	if !ok {
		return nil, errNoOutbox
	}
	var req api.RetryRequest
	if err := decode(w, r, MaxRequestBody, &req); err != nil {
		return nil, err
	}
	return os.RetryOutbox(r.Context(), req)
}
