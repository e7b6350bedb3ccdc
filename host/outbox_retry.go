package host

import (
	"context"
	"errors"
	"fmt"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/outbox"
)

var _ api.OutboxService = (*Host)(nil)

// RetryOutbox makes outbox rows that wait in backoff due now (api.OutboxService): the rows of
// the named messages, or every waiting row with All, in one transaction. A named message with no
// row that can be retried refuses the whole request (api.ErrNotFound) and changes nothing. A daemon
// starts a pass at once; without one, the rows leave when the daemon starts.
func (h *Host) RetryOutbox(ctx context.Context, req api.RetryRequest) (api.RetryResult, error) {
	const op = "host: outbox retry"
	switch {
	case req.All && len(req.IDs) > 0:
		return api.RetryResult{}, fmt.Errorf("%s: %w: name message ids or all, not both", op, api.ErrInvalid)
	case !req.All && len(req.IDs) == 0:
		return api.RetryResult{}, fmt.Errorf("%s: %w: name message ids, or all", op, api.ErrInvalid)
	case len(req.IDs) > api.MaxRetryIDs:
		return api.RetryResult{}, fmt.Errorf("%s: %w: %d ids, at most %d", op, api.ErrInvalid, len(req.IDs), api.MaxRetryIDs)
	}
	ids := req.IDs
	if req.All {
		ids = []string{""}
	}
	var res api.RetryResult
	err := h.ob.Update(ctx, func(t *outbox.Tx) error {
		for _, id := range ids {
			if id == "" && !req.All {
				return fmt.Errorf("%w: empty message id", api.ErrInvalid)
			}
			moved, matched, err := t.RetryNow(id)
			if errors.Is(err, outbox.ErrInvalid) {
				return fmt.Errorf("%w: %v", api.ErrInvalid, err)
			}
			if err != nil {
				return err
			}
			if id != "" && matched == 0 {
				return fmt.Errorf("%w: message %s has no outbox row waiting to be sent (unknown, delivered, or at the relay awaiting its receipt; see `agentmbx sent %s`)", api.ErrNotFound, id, id)
			}
			res.Due += moved
			res.Already += matched - moved
		}
		return nil
	})
	if err != nil {
		return api.RetryResult{}, fmt.Errorf("%s: %w", op, err)
	}
	if res.Due > 0 {
		h.kickOutbox()
	}
	return res, nil
}
