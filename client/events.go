package client

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"syscall"

	"github.com/agentmbx/agentmbx/api"
)

// maxEventLine caps one line of the event stream (an event is well under 1 KiB).
const maxEventLine = 64 << 10

var _ api.EventService = (*Client)(nil)

// MailEvents subscribes to the deliveries into agent's mailbox ("" for every agent's) over the
// daemon's event stream. It returns once the daemon has the subscription in place; the channel is
// closed when ctx ends, the daemon stops or its stream breaks (a line that is not an event ends
// it too). Reconnecting, and reading the mailbox again after a gap, is the caller's part.
func (c *Client) MailEvents(ctx context.Context, agent string) (<-chan api.MailEvent, error) {
	u := "http://agentmbx/v1/events"
	if agent != "" {
		u += "?" + url.Values{"agent": {agent}}.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("client: events: %w", err)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return nil, fmt.Errorf("client: events: %w", ctxErr)
		}
		if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) {
			err = fmt.Errorf("%w (%w)", ErrNoDaemon, err)
		}
		return nil, fmt.Errorf("client: events: %w", err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		defer resp.Body.Close()
		data, _ := io.ReadAll(io.LimitReader(resp.Body, maxEventLine))
		return nil, decodeError(resp.StatusCode, data)
	}
	ch := make(chan api.MailEvent, 64)
	go func() {
		defer close(ch)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 0, 1024), maxEventLine)
		for sc.Scan() {
			var ev api.MailEvent
			if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
				return
			}
			select {
			case ch <- ev:
			case <-ctx.Done():
				return
			}
		}
	}()
	return ch, nil
}
