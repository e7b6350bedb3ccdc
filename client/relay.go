package client

import (
	"context"
	"net/http"

	"github.com/agentmbx/agentmbx/api"
)

// RelayStatus asks the daemon about its relay.
func (c *Client) RelayStatus(ctx context.Context) (api.RelayStatus, error) {
	var st api.RelayStatus
	err := c.do(ctx, http.MethodGet, "/v1/relay", nil, nil, &st)
	return st, err
}

// RelaySet asks the daemon to pin the relay (it fetches the relay's info itself).
func (c *Client) RelaySet(ctx context.Context, req api.RelaySetRequest) (api.RelayStatus, error) {
	var st api.RelayStatus
	err := c.do(ctx, http.MethodPost, "/v1/relay/set", nil, req, &st)
	return st, err
}

// RelayUnset asks the daemon to forget its relay.
func (c *Client) RelayUnset(ctx context.Context) (api.RelayStatus, error) {
	var st api.RelayStatus
	err := c.do(ctx, http.MethodPost, "/v1/relay/unset", nil, struct{}{}, &st)
	return st, err
}

// RelayQuarantine lists the relay items the daemon's host rejected.
func (c *Client) RelayQuarantine(ctx context.Context) ([]api.QuarantineItem, error) {
	var items []api.QuarantineItem
	err := c.do(ctx, http.MethodGet, "/v1/relay/quarantine", nil, nil, &items)
	return items, err
}

// Client implements api.RelayService over the control socket.
var _ api.RelayService = (*Client)(nil)

var _ api.QuarantineService = (*Client)(nil)

// ReleaseQuarantined processes a quarantined item again (POST /v1/relay/quarantine/release).
func (c *Client) ReleaseQuarantined(ctx context.Context, req api.QuarantineReleaseRequest) (api.QuarantineRelease, error) {
	var out api.QuarantineRelease
	return out, c.do(ctx, http.MethodPost, "/v1/relay/quarantine/release", nil, req, &out)
}

// PurgeQuarantined deletes old quarantined items (POST /v1/relay/quarantine/purge).
func (c *Client) PurgeQuarantined(ctx context.Context, req api.QuarantinePurgeRequest) (api.QuarantinePurge, error) {
	var out api.QuarantinePurge
	return out, c.do(ctx, http.MethodPost, "/v1/relay/quarantine/purge", nil, req, &out)
}
