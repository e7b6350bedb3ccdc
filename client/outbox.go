package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/agentmbx/agentmbx/api"
)

// Client implements api.OutboxService over the control socket.
var _ api.OutboxService = (*Client)(nil)

// RetryOutbox asks the daemon to make outbox rows due now (api.OutboxService).
func (c *Client) RetryOutbox(ctx context.Context, req api.RetryRequest) (api.RetryResult, error) {
	return call[api.RetryResult](ctx, c, http.MethodPost, "/v1/outbox/retry", nil, req)
}

// OutboxPage lists a page of the outbox (api.OutboxService).
func (c *Client) OutboxPage(ctx context.Context, req api.OutboxRequest) (api.OutboxPage, error) {
	q := url.Values{"state": req.States}
	if req.All {
		q.Set("all", "1")
	}
	setLimit(q, req.Limit)
	return call[api.OutboxPage](ctx, c, http.MethodGet, "/v1/outbox/page", q, nil)
}
