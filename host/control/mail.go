package control

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/agentmbx/agentmbx/api"
)

// The mail routes of the control socket (see api.MailService), served when the service is also
// an api.MailService (host.Service is):
//
//	GET  /v1/inbox/page  ?agent=&all=1&since=&limit=&peek=1 → api.InboxPage
//	GET  /v1/wait/new    ?agent=&timeout=&limit=      → api.InboxPage
//	GET  /v1/thread      ?agent=&id=                  → api.Thread
//	GET  /v1/search      ?agent=&q=&limit=            → api.SearchResult
//	POST /v1/reply       api.ReplyRequest             → api.SendResult
//	GET  /v1/agents/known                             → []api.KnownAgent

var errNoMail = api.NewError(api.CodeNotFound, "this daemon has no threads, search or replies",
	"the daemon may be of another version; compare `agentmbx version` with the daemon's")

func (h *handler) mailSvc() (api.MailService, error) {
	ms, ok := h.svc.(api.MailService)
	if !ok {
		return nil, errNoMail
	}
	return ms, nil
}

func (h *handler) inboxPage(_ http.ResponseWriter, r *http.Request) (any, error) {
	ms, err := h.mailSvc()
	if err != nil {
		return nil, err
	}
	q := r.URL.Query()
	all, limit, err := pageParams(q)
	if err != nil {
		return nil, err
	}
	peek, err := boolParam(q.Get("peek"))
	if err != nil {
		return nil, err
	}
	page, err := ms.InboxPage(r.Context(), api.InboxRequest{Agent: q.Get("agent"), All: all, Since: q.Get("since"), Limit: limit, Peek: peek})
	page.Messages = nonNil(page.Messages)
	return page, err
}

func (h *handler) waitNew(_ http.ResponseWriter, r *http.Request) (any, error) {
	ms, err := h.mailSvc()
	if err != nil {
		return nil, err
	}
	q := r.URL.Query()
	timeout, err := waitParam(q.Get("timeout"))
	if err != nil {
		return nil, err
	}
	limit, err := intParam(q, "limit")
	if err != nil {
		return nil, err
	}
	page, err := ms.WaitNew(r.Context(), api.WaitRequest{Agent: q.Get("agent"), Timeout: timeout, Limit: limit})
	if err != nil && r.Context().Err() != nil {
		return nil, context.Cause(r.Context()) // the caller went away
	}
	page.Messages = nonNil(page.Messages)
	return page, err
}

func (h *handler) thread(_ http.ResponseWriter, r *http.Request) (any, error) {
	ms, err := h.mailSvc()
	if err != nil {
		return nil, err
	}
	q := r.URL.Query()
	t, err := ms.Thread(r.Context(), api.ThreadRequest{Agent: q.Get("agent"), ID: q.Get("id")})
	t.Messages = nonNil(t.Messages)
	return t, err
}

func (h *handler) search(_ http.ResponseWriter, r *http.Request) (any, error) {
	ms, err := h.mailSvc()
	if err != nil {
		return nil, err
	}
	q := r.URL.Query()
	limit, err := intParam(q, "limit")
	if err != nil {
		return nil, err
	}
	res, err := ms.Search(r.Context(), api.SearchRequest{Agent: q.Get("agent"), Query: q.Get("q"), Limit: limit})
	res.Messages = nonNil(res.Messages)
	return res, err
}

func (h *handler) reply(w http.ResponseWriter, r *http.Request) (any, error) {
	ms, err := h.mailSvc()
	if err != nil {
		return nil, err
	}
	var req api.ReplyRequest
	if err := decode(w, r, MaxRequestBody, &req); err != nil {
		return nil, err
	}
	return ms.Reply(r.Context(), req)
}

func (h *handler) knownAgents(_ http.ResponseWriter, r *http.Request) (any, error) {
	ms, err := h.mailSvc()
	if err != nil {
		return nil, err
	}
	ks, err := ms.KnownAgents(r.Context())
	return nonNil(ks), err
}

// intParam reads an optional non-negative integer query parameter (absent is 0).
// pageParams reads a page's all=1 and limit=.
func pageParams(q url.Values) (all bool, limit int, err error) {
	if all, err = boolParam(q.Get("all")); err == nil {
		limit, err = intParam(q, "limit")
	}
	return all, limit, err
}

func intParam(q url.Values, name string) (int, error) {
	s := q.Get(name)
	if s == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, api.NewError(api.CodeBadRequest, fmt.Sprintf("bad %s %q", name, s), "a whole number, 0 or more")
	}
	return n, nil
}
