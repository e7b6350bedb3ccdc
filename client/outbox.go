package client

import (
	"context"
	"net/http"

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
