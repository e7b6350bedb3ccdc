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
	var res api.RetryResult
	err := c.do(ctx, http.MethodPost, "/v1/outbox/retry", nil, req, &res)
	return res, err
}

// OutboxPage lists a page of the outbox (api.OutboxService).
func (c *Client) OutboxPage(ctx context.Context, req api.OutboxRequest) (api.OutboxPage, error) {
	q := url.Values{"state": req.States}
	if req.All {
		q.Set("all", "1")
	}
	setLimit(q, req.Limit)
	var res api.OutboxPage
	err := c.do(ctx, http.MethodGet, "/v1/outbox/page", q, nil, &res)
	return res, err
}
