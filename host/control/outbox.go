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

func (h *handler) outboxPage(_ http.ResponseWriter, r *http.Request) (any, error) {
	os, ok := h.svc.(api.OutboxService)
	if !ok {
		return nil, errNoOutboxPage
	}
	q := r.URL.Query()
	all, limit, err := pageParams(q)
	if err != nil {
		return nil, err
	}
	if len(q["state"]) > maxStates {
		return nil, api.NewError(api.CodeBadRequest, "too many states", "name each outbox state at most once")
	}
	page, err := os.OutboxPage(r.Context(), api.OutboxRequest{States: q["state"], All: all, Limit: limit})
	page.Rows = nonNil(page.Rows)
	return page, err
}

// maxStates bounds the states one outbox page request names (there are six).
const maxStates = 6

var errNoOutboxPage = api.NewError(api.CodeNotFound, "this daemon cannot list outbox pages",
	"the daemon may be of another version; compare `agentmbx version` with the daemon's")
