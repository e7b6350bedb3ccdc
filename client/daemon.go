package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/agentmbx/agentmbx/api"
)

var _ api.DaemonService = (*Client)(nil)

// DaemonStatus describes the daemon (GET /v1/daemon).
func (c *Client) DaemonStatus(ctx context.Context) (api.DaemonStatus, error) {
	var st api.DaemonStatus
	return st, c.do(ctx, http.MethodGet, "/v1/daemon", nil, nil, &st)
}

// StopDaemon asks the daemon to stop gracefully (POST /v1/daemon/stop). It answers once the
// stop has begun; the daemon's process exits soon after (its PID is in the answer).
func (c *Client) StopDaemon(ctx context.Context) (api.DaemonStatus, error) {
	var st api.DaemonStatus
	return st, c.do(ctx, http.MethodPost, "/v1/daemon/stop", nil, nil, &st)
}

// RotateKeys asks the daemon to rotate the host's keys (POST /v1/daemon/rotate). It answers once
// the daemon serves with the new keys.
func (c *Client) RotateKeys(ctx context.Context) (*api.Rotation, error) {
	var r api.Rotation
	if err := c.do(ctx, http.MethodPost, "/v1/daemon/rotate", nil, nil, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

var _ api.IDResolver = (*Client)(nil)

// ResolveID turns a message id prefix into the full id (GET /v1/resolve).
func (c *Client) ResolveID(ctx context.Context, prefix string) (string, error) {
	var a api.ResolveAnswer
	err := c.do(ctx, http.MethodGet, "/v1/resolve", url.Values{"prefix": {prefix}}, nil, &a)
	return a.ID, err
}
