package control

import (
	"net/http"

	"github.com/agentmbx/agentmbx/api"
)

// errNoDaemonRoutes answers the daemon routes of a handler whose service is not a daemon's.
var errNoDaemonRoutes = api.NewError(api.CodeNotFound, "this daemon cannot report on or stop itself",
	"the daemon may be of another version; compare `agentmbx version` with the daemon's")

func (h *handler) daemonSvc() (api.DaemonService, error) {
	ds, ok := h.svc.(api.DaemonService)
	if !ok {
		return nil, errNoDaemonRoutes
	}
	return ds, nil
}

func (h *handler) daemonStatus(_ http.ResponseWriter, r *http.Request) (any, error) {
	ds, err := h.daemonSvc()
	if err != nil {
		return nil, err
	}
	return ds.DaemonStatus(r.Context())
}

func (h *handler) daemonStop(_ http.ResponseWriter, r *http.Request) (any, error) {
	ds, err := h.daemonSvc()
	if err != nil {
		return nil, err
	}
	return ds.StopDaemon(r.Context())
}

func (h *handler) resolve(_ http.ResponseWriter, r *http.Request) (any, error) {
	res, ok := h.svc.(api.IDResolver)
	if !ok {
		return nil, api.NewError(api.CodeNotFound, "this daemon does not resolve short message ids",
			"give the whole id; the daemon may be of another version")
	}
	id, err := res.ResolveID(r.Context(), r.URL.Query().Get("prefix"))
	return api.ResolveAnswer{ID: id}, err
}

func (h *handler) daemonRotate(_ http.ResponseWriter, r *http.Request) (any, error) {
	ds, err := h.daemonSvc()
	if err != nil {
		return nil, err
	}
	return ds.RotateKeys(r.Context())
}
