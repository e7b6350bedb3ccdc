package relayclient

import (
	"context"
	"errors"
	"fmt"

	"github.com/agentmbx/agentmbx/mbx"
)

// Discover fetches GET /v2/relay/info from the relay at rawURL without a hop and without a pin:
// what `agentmbx relay set` shows the owner before pinning (PinInfo). A relay answering 404 speaks
// v1 only (ErrV1Only).
func Discover(ctx context.Context, rawURL string, opts *Options) (mbx.InfoResponse, error) {
	base, err := NormalizeURL(rawURL)
	if err != nil {
		return mbx.InfoResponse{}, fmt.Errorf("relayclient: discover: %w", err)
	}
	s, err := newSettings(opts)
	if err != nil {
		return mbx.InfoResponse{}, fmt.Errorf("relayclient: discover: %w", err)
	}
	a, err := send(ctx, &s, base, request{op: "info", method: "GET", path: "/v2/relay/info", max: maxSmallAnswer, retry: true}, nil)
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			return mbx.InfoResponse{}, fmt.Errorf("%w: %w", ErrV1Only, err)
		}
		return mbx.InfoResponse{}, err
	}
	return checkInfo(a, "")
}

// Info fetches GET /v2/relay/info with a signed hop, so a relay that knows this host adds the
// You block (its head_seq, acked_through and the enc-key ad it holds). You is nil when the relay
// does not know this host key: enrol. A relay_pubkey other than the pinned one stops the Client
// (ErrRelayKeyChanged).
func (c *Client) Info(ctx context.Context) (mbx.InfoResponse, error) {
	a, err := c.do(ctx, request{op: "info", method: "GET", path: "/v2/relay/info", hop: true, retry: true, max: maxSmallAnswer})
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			return mbx.InfoResponse{}, fmt.Errorf("%w: %w", ErrV1Only, err)
		}
		return mbx.InfoResponse{}, err
	}
	info, err := checkInfo(a, c.key.PublicKey())
	if err != nil {
		return mbx.InfoResponse{}, err
	}
	if info.RelayPubkey != c.pin.RelayKey {
		return mbx.InfoResponse{}, c.stop(info.RelayPubkey)
	}
	return info, nil
}

// checkInfo parses an info answer and checks what a client relies on.
func checkInfo(a answer, ownKey string) (mbx.InfoResponse, error) {
	var info mbx.InfoResponse
	if err := decode("info", a, &info); err != nil {
		return mbx.InfoResponse{}, err
	}
	l := info.Limits
	switch {
	case info.V != 2:
		return mbx.InfoResponse{}, fmt.Errorf("relayclient: info: %w: v %d, want 2", ErrProtocol, info.V)
	case !mbx.ValidPublicKey(info.RelayPubkey):
		return mbx.InfoResponse{}, fmt.Errorf("relayclient: info: %w: relay_pubkey is not a key", ErrProtocol)
	case !validEpoch(info.Epoch):
		return mbx.InfoResponse{}, fmt.Errorf("relayclient: info: %w: epoch missing, over %d bytes or not text", ErrProtocol, maxEpochLen)
	case l.MaxItemBytes <= 0 || l.MaxBatch <= 0 || l.MaxPull <= 0 || l.MaxPullBytes <= 0 || l.RetentionDays <= 0:
		return mbx.InfoResponse{}, fmt.Errorf("relayclient: info: %w: limits missing (max_item_bytes, max_batch, max_pull, max_pull_bytes, retention_days)", ErrProtocol)
	case l.RetentionDays > maxRetentionDays:
		return mbx.InfoResponse{}, fmt.Errorf("relayclient: info: %w: retention_days %d is over %d", ErrProtocol, l.RetentionDays, maxRetentionDays)
	}
	if info.You != nil {
		y := info.You
		if ownKey == "" || y.Pubkey != ownKey || y.HeadSeq < 0 || y.AckedThrough < 0 {
			return mbx.InfoResponse{}, fmt.Errorf("relayclient: info: %w: the you block is not this host's", ErrProtocol)
		}
	}
	return info, nil
}
