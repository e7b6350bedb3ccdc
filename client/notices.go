package client

import (
	"context"
	"net/http"

	"github.com/agentmbx/agentmbx/api"
)

var _ api.NoticeService = (*Client)(nil)

// Notices returns the agent's new mail that no earlier call announced, and marks it announced
// (see api.NoticeService).
func (c *Client) Notices(ctx context.Context, req api.NoticeRequest) (api.InboxPage, error) {
	return call[api.InboxPage](ctx, c, http.MethodPost, "/v1/notices", nil, req)
}
