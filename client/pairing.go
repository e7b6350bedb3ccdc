package client

import (
	"context"
	"net/http"
	"net/url"
	"time"

	"github.com/agentmbx/agentmbx/api"
)

// Client implements api.PairingService over the control socket: the daemon runs the session (its
// LAN server answers the other host).
var _ api.PairingService = (*Client)(nil)

// StartPairing asks the daemon to open a pairing session as the inviter (ttl 0: the daemon's
// default) and returns the one-time token to pass to the other host.
func (c *Client) StartPairing(ctx context.Context, ttl time.Duration) (string, error) {
	req := api.PairStartRequest{}
	if ttl > 0 {
		req.TTL = ttl.String()
	}
	var res api.PairStartAnswer
	err := c.do(ctx, http.MethodPost, "/v1/pair/start", nil, req, &res)
	return res.Token, err
}

// PairingStatus returns the daemon's current (or last) pairing session state.
func (c *Client) PairingStatus(ctx context.Context) (api.PairingState, error) {
	return call[api.PairingState](ctx, c, http.MethodGet, "/v1/pair", nil, nil)
}

// WaitPairing waits until the daemon's session leaves the state from and returns the new state.
// It long-polls: each request is held by the daemon until the state changes or
// api.DefaultPairWait passes, and the next one is sent at once. When ctx ends first it returns
// the last state seen and ctx's error.
func (c *Client) WaitPairing(ctx context.Context, from api.PairState) (api.PairingState, error) {
	q := url.Values{"from": {from.String()}, "timeout": {api.DefaultPairWait.String()}}
	for {
		var st api.PairingState
		if err := c.do(ctx, http.MethodGet, "/v1/pair/wait", q, nil, &st); err != nil {
			return st, err
		}
		if st.State != from {
			return st, nil
		}
		if err := ctx.Err(); err != nil {
			return st, err
		}
	}
}

// JoinPairing asks the daemon to join the inviter at addr with token; it returns the session
// state with the code for the user to compare.
func (c *Client) JoinPairing(ctx context.Context, addr, token string) (api.PairingState, error) {
	return call[api.PairingState](ctx, c, http.MethodPost, "/v1/pair/join", nil, api.PairJoinRequest{Addr: addr, Token: token})
}

// ConfirmPairing gives this side's answer to the code and waits for the other side's: it returns
// the pinned peer when both accepted. Ending ctx cancels the session.
func (c *Client) ConfirmPairing(ctx context.Context, accept bool) (api.Peer, error) {
	return call[api.Peer](ctx, c, http.MethodPost, "/v1/pair/confirm", nil, api.PairConfirmRequest{Accept: &accept})
}

// CancelPairing ends the daemon's open pairing session without pinning.
func (c *Client) CancelPairing(ctx context.Context) error {
	return c.do(ctx, http.MethodPost, "/v1/pair/cancel", nil, struct{}{}, nil)
}
