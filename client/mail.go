package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"github.com/agentmbx/agentmbx/api"
)

var _ api.MailService = (*Client)(nil)

// InboxPage lists the newest req.Limit messages of an agent's mail after req.Since, oldest
// first, and how many older ones it left out.
func (c *Client) InboxPage(ctx context.Context, req api.InboxRequest) (api.InboxPage, error) {
	q := url.Values{"agent": {req.Agent}}
	if req.All {
		q.Set("all", "1")
	}
	if req.Since != "" {
		q.Set("since", req.Since)
	}
	if req.Peek {
		q.Set("peek", "1")
	}
	setLimit(q, req.Limit)
	return call[api.InboxPage](ctx, c, http.MethodGet, "/v1/inbox/page", q, nil)
}

// WaitNew blocks until the agent has new mail or req.Timeout passes, and returns the oldest
// req.Limit new messages (empty at the timeout). It is one long-poll request; ctx may end it
// earlier.
func (c *Client) WaitNew(ctx context.Context, req api.WaitRequest) (api.InboxPage, error) {
	q := url.Values{"agent": {req.Agent}, "timeout": {req.Timeout.String()}}
	setLimit(q, req.Limit)
	return call[api.InboxPage](ctx, c, http.MethodGet, "/v1/wait/new", q, nil)
}

// Thread returns the messages of the thread of a message (or of a thread id), oldest first.
func (c *Client) Thread(ctx context.Context, req api.ThreadRequest) (api.Thread, error) {
	q := url.Values{"id": {req.ID}}
	if req.Agent != "" {
		q.Set("agent", req.Agent)
	}
	return call[api.Thread](ctx, c, http.MethodGet, "/v1/thread", q, nil)
}

// Search finds the messages holding every word of the query, newest first.
func (c *Client) Search(ctx context.Context, req api.SearchRequest) (api.SearchResult, error) {
	q := url.Values{"q": {req.Query}}
	if req.Agent != "" {
		q.Set("agent", req.Agent)
	}
	setLimit(q, req.Limit)
	return call[api.SearchResult](ctx, c, http.MethodGet, "/v1/search", q, nil)
}

// Reply sends a message to the sender of a message the agent holds, in its thread.
func (c *Client) Reply(ctx context.Context, req api.ReplyRequest) (api.SendResult, error) {
	return call[api.SendResult](ctx, c, http.MethodPost, "/v1/reply", nil, req)
}

// KnownAgents lists the agents of paired hosts the host knows of.
func (c *Client) KnownAgents(ctx context.Context) ([]api.KnownAgent, error) {
	return call[[]api.KnownAgent](ctx, c, http.MethodGet, "/v1/agents/known", nil, nil)
}

func setLimit(q url.Values, n int) {
	if n != 0 {
		q.Set("limit", strconv.Itoa(n))
	}
}
