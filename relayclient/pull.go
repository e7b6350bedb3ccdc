package relayclient

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/agentmbx/agentmbx/mbx"
)

// PullRequest is what a Pull asks for.
type PullRequest struct {
	// After is the receive position: items with a seq above it are wanted.
	After int64
	// Limit caps the page (0: the relay's max_pull).
	Limit int
	// Epoch is the epoch the position belongs to ("" before the first pull). A relay in
	// another epoch answers 409 (ErrEpochChanged with the current one).
	Epoch string
	// Wait asks a relay that supports long polling to hold an empty answer until an item arrives
	// or Wait passes (whole seconds, at most MaxWait). Relays without it answer at once.
	Wait time.Duration
}

// query is the request's query string, in a fixed order; the hop signs it as sent.
func (r PullRequest) query() string {
	var b strings.Builder
	b.WriteString("after=")
	b.WriteString(strconv.FormatInt(r.After, 10))
	if r.Limit > 0 {
		b.WriteString("&limit=")
		b.WriteString(strconv.Itoa(r.Limit))
	}
	if r.Epoch != "" {
		b.WriteString("&epoch=")
		b.WriteString(url.QueryEscape(r.Epoch))
	}
	if w := r.waitSeconds(); w > 0 {
		b.WriteString("&wait=")
		b.WriteString(strconv.Itoa(w))
	}
	return b.String()
}

func (r PullRequest) waitSeconds() int {
	w := min(r.Wait, MaxWait)
	if w <= 0 {
		return 0
	}
	return int((w + time.Second - 1) / time.Second)
}

// Pull fetches one page of this host's queue (GET /v2/relay/items?after=&limit=&epoch=&wait=,
// the query covered by the hop). An empty page of a long poll that the relay answered with a
// Retry-After (it could not hold the poll) carries it as RetryAfter. A 409 is an *EpochError (ErrEpochChanged) with the relay's current
// epoch: reset the position to 0 in that epoch and pull again. The page's items are returned as
// the relay served them (checkpoint.Store.ProcessPage decodes and checks each one, so one bad item
// cannot block the queue); the page itself must be well formed.
func (c *Client) Pull(ctx context.Context, r PullRequest) (mbx.PullResponse, error) {
	if r.After < 0 || r.Limit < 0 || r.Wait < 0 || len(r.Epoch) > maxEpochLen {
		return mbx.PullResponse{}, fmt.Errorf("relayclient: pull: %w: after %d, limit %d, wait %v, epoch of %d bytes",
			ErrInvalid, r.After, r.Limit, r.Wait, len(r.Epoch))
	}
	wait := time.Duration(r.waitSeconds()) * time.Second
	a, err := c.do(ctx, request{op: "pull", method: "GET", path: "/v2/relay/items?" + r.query(), hop: true,
		max: maxPullAnswer, timeout: c.timeout + wait, retry: wait == 0})
	if err != nil {
		return mbx.PullResponse{}, err
	}
	var page mbx.PullResponse
	if err := decode("pull", a, &page); err != nil {
		return mbx.PullResponse{}, err
	}
	switch {
	case !validEpoch(page.Epoch):
		return mbx.PullResponse{}, fmt.Errorf("relayclient: pull: %w: epoch missing, over %d bytes or not text", ErrProtocol, maxEpochLen)
	case page.HeadSeq < 0 || page.LastSeq < 0:
		return mbx.PullResponse{}, fmt.Errorf("relayclient: pull: %w: negative head_seq or last_seq", ErrProtocol)
	}
	for _, it := range page.Items {
		if it.Seq > page.HeadSeq {
			return mbx.PullResponse{}, fmt.Errorf("relayclient: pull: %w: item seq %d above head_seq %d", ErrProtocol, it.Seq, page.HeadSeq)
		}
	}
	if page.Items == nil {
		page.Items = []mbx.PullItem{}
	}
	if len(page.Items) == 0 && wait > 0 {
		page.RetryAfter = a.retryAfter // the relay did not hold the poll (full, or shutting down)
	}
	return page, nil
}

// Ack tells the relay this host durably processed its items through through (POST
// /v2/relay/ack), so the relay deletes them. Call it only after the receive checkpoint committed,
// with through ≤ received_through. A 409 is an *EpochError (ErrEpochChanged); a BAD_ACK (through
// beyond the relay's head) is ErrRewound: the relay's store went back in time, reset to 0.
func (c *Client) Ack(ctx context.Context, epoch string, through int64) (mbx.AckResponse, error) {
	if epoch == "" || len(epoch) > maxEpochLen || through < 0 {
		return mbx.AckResponse{}, fmt.Errorf("relayclient: ack: %w: epoch %q through %d", ErrInvalid, epoch, through)
	}
	body, err := mbx.MarshalJSON(mbx.AckRequest{Epoch: epoch, Through: through})
	if err != nil {
		return mbx.AckResponse{}, fmt.Errorf("relayclient: ack: %w", err)
	}
	a, err := c.do(ctx, request{op: "ack", method: "POST", path: "/v2/relay/ack", body: body, hop: true, retry: true, max: maxSmallAnswer})
	if err != nil {
		return mbx.AckResponse{}, err
	}
	var res mbx.AckResponse
	if err := decode("ack", a, &res); err != nil {
		return mbx.AckResponse{}, err
	}
	if res.AckedThrough < 0 || res.HeadSeq < 0 || res.Deleted < 0 {
		return mbx.AckResponse{}, fmt.Errorf("relayclient: ack: %w: negative counts", ErrProtocol)
	}
	return res, nil
}
