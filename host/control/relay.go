package control

import (
	"net/http"

	"github.com/agentmbx/agentmbx/api"
)

// The relay routes of the control socket, served when the service is also an api.RelayService
// (host.Service is, through the host's relay link):
//
//	GET  /v1/relay                                → api.RelayStatus
//	POST /v1/relay/set    api.RelaySetRequest     → api.RelayStatus
//	POST /v1/relay/unset                          → api.RelayStatus
//	GET  /v1/relay/quarantine                     → []api.QuarantineItem

// errNoRelay answers the relay routes of a handler whose service has no relay side.
var errNoRelay = api.NewError(api.CodeNotFound, "this daemon does not use a relay",
	"the daemon may be of another version; compare `agentmbx version` with the daemon's")

func (h *handler) relaySvc() (api.RelayService, error) {
	rs, ok := h.svc.(api.RelayService)
	if !ok {
		return nil, errNoRelay
	}
	return rs, nil
}

func (h *handler) relayStatus(_ http.ResponseWriter, r *http.Request) (any, error) {
	rs, err := h.relaySvc()
	if err != nil {
		return nil, err
	}
	st, err := rs.RelayStatus(r.Context())
	st.Daemon = true
	return st, err
}

func (h *handler) relaySet(w http.ResponseWriter, r *http.Request) (any, error) {
	rs, err := h.relaySvc()
	if err != nil {
		return nil, err
	}
	var req api.RelaySetRequest
	if err := decode(w, r, MaxRequestBody, &req); err != nil {
		return nil, err
	}
	st, err := rs.RelaySet(r.Context(), req)
	st.Daemon = true
	return st, err
}

func (h *handler) relayUnset(w http.ResponseWriter, r *http.Request) (any, error) {
	rs, err := h.relaySvc()
	if err != nil {
		return nil, err
	}
	if _, err := readBody(w, r, MaxRequestBody); err != nil {
		return nil, err
	}
	st, err := rs.RelayUnset(r.Context())
	st.Daemon = true
	return st, err
}

func (h *handler) relayQuarantine(_ http.ResponseWriter, r *http.Request) (any, error) {
	rs, err := h.relaySvc()
	if err != nil {
		return nil, err
	}
	items, err := rs.RelayQuarantine(r.Context())
	return nonNil(items), err
}

// errNoQuarantine answers the quarantine actions of a handler whose service has none.
var errNoQuarantine = api.NewError(api.CodeNotFound, "this daemon cannot release or purge quarantined items",
	"the daemon may be of another version; compare `agentmbx version` with the daemon's")

func (h *handler) quarantineRelease(w http.ResponseWriter, r *http.Request) (any, error) {
	qs, ok := h.svc.(api.QuarantineService)
	if !ok {
		return nil, errNoQuarantine
	}
	var req api.QuarantineReleaseRequest
	if err := decode(w, r, MaxRequestBody, &req); err != nil {
		return nil, err
	}
	return qs.ReleaseQuarantined(r.Context(), req)
}

func (h *handler) quarantinePurge(w http.ResponseWriter, r *http.Request) (any, error) {
	qs, ok := h.svc.(api.QuarantineService)
	if !ok {
		return nil, errNoQuarantine
	}
	var req api.QuarantinePurgeRequest
	if err := decode(w, r, MaxRequestBody, &req); err != nil {
		return nil, err
	}
	return qs.PurgeQuarantined(r.Context(), req)
}
