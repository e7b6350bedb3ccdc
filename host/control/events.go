package control

import (
	"encoding/json"
	"net/http"

	"github.com/agentmbx/agentmbx/api"
)

// The event route (api.EventService), served when the service implements it:
//
//	GET /v1/events ?agent=   → MailEvent lines (application/x-ndjson) until either side leaves

var errNoEvents = api.NewError(api.CodeNotFound, "this daemon has no event stream",
	"the daemon may be of another version; compare `agentmbx version` with the daemon's")

// streamed is the answer of a route that wrote its response itself.
type streamed struct{}

// events subscribes, sends the status and headers once the subscription is in place, then one
// JSON line per event, flushed at once, until the caller leaves (the request's context ends)
// or the host stops (the channel closes).
func (h *handler) events(w http.ResponseWriter, r *http.Request) (any, error) {
	es, ok := h.svc.(api.EventService)
	if !ok {
		return nil, errNoEvents
	}
	ch, err := es.MailEvents(r.Context(), r.URL.Query().Get("agent"))
	if err != nil {
		return nil, err
	}
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	if err := rc.Flush(); err != nil {
		return streamed{}, nil // the caller is gone; the subscription ends with its context
	}
	enc := json.NewEncoder(w)
	for {
		select {
		case <-r.Context().Done():
			return streamed{}, nil // the caller left; its context ends the subscription
		case ev, ok := <-ch:
			if !ok {
				return streamed{}, nil
			}
			if enc.Encode(ev) != nil || rc.Flush() != nil {
				return streamed{}, nil
			}
		}
	}
}
