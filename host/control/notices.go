package control

import (
	"net/http"

	"github.com/agentmbx/agentmbx/api"
)

// The notice route (api.NoticeService), served when the service implements it:
//
//	POST /v1/notices  api.NoticeRequest → api.InboxPage

var errNoNotices = api.NewError(api.CodeNotFound, "this daemon has no notices",
	"the daemon may be of another version; compare `agentmbx version` with the daemon's")

func (h *handler) notices(w http.ResponseWriter, r *http.Request) (any, error) {
	ns, ok := h.svc.(api.NoticeService)
	if !ok {
		return nil, errNoNotices
	}
	var req api.NoticeRequest
	if err := decode(w, r, MaxRequestBody, &req); err != nil {
		return nil, err
	}
	page, err := ns.Notices(r.Context(), req)
	page.Messages = nonNil(page.Messages)
	return page, err
}
