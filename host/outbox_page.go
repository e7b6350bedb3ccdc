package host

import (
	"context"
	"fmt"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/outbox"
)

// activeStates are the states `agentmbx outbox` lists by default.
var activeStates = []outbox.State{outbox.StatePending, outbox.StateRelayAccepted}

// OutboxPage lists the newest req.Limit outbox rows of the states asked for (the active ones by
// default, every state with All), oldest first, and how many older ones it left out, with the
// reason each active row waits. It reads the outbox's created index, so it decodes only the
// rows it returns.
func (h *Host) OutboxPage(ctx context.Context, req api.OutboxRequest) (api.OutboxPage, error) {
	limit, err := api.PageSize(req.Limit)
	if err != nil {
		return api.OutboxPage{}, fmt.Errorf("host: outbox page: %w", err)
	}
	states, err := parseStates(req.States)
	if err != nil {
		return api.OutboxPage{}, fmt.Errorf("host: outbox page: %w", err)
	}
	if len(states) == 0 && !req.All {
		states = activeStates
	}
	p, err := h.ob.Page(ctx, states, limit)
	if err != nil {
		return api.OutboxPage{}, fmt.Errorf("host: outbox page: %w", err)
	}
	rows, err := h.withWaiting(p.Rows)
	if err != nil {
		return api.OutboxPage{}, fmt.Errorf("host: outbox page: %w", err)
	}
	return api.OutboxPage{Rows: rows, More: p.More}, nil
}

// parseStates reads outbox state names (each at most once).
func parseStates(names []string) ([]outbox.State, error) {
	var out []outbox.State
	for _, n := range names {
		s, err := outbox.ParseState(n)
		if err != nil {
			return nil, fmt.Errorf("%w: outbox state %q (pending, relay-accepted, expired, unconfirmed, rejected or done)", api.ErrInvalid, n)
		}
		out = append(out, s)
	}
	return out, nil
}
