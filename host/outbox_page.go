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
// default, every state with All), oldest first, and how many older ones it left out. It reads
// the outbox's created index, so it decodes only the rows it returns.
func (h *Host) OutboxPage(ctx context.Context, req api.OutboxRequest) (api.OutboxPage, error) {
	limit, err := pageSize(req.Limit)
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
	out := api.OutboxPage{Rows: make([]api.OutboxRow, 0, len(p.Rows)), More: p.More}
	for _, r := range p.Rows {
		out.Rows = append(out.Rows, apiRow(r))
	}
	return out, nil
}

// parseStates reads outbox state names (each at most once).
func parseStates(names []string) ([]outbox.State, error) {
	var out []outbox.State
	for _, n := range names {
		s, err := outbox.ParseState(n)
		if err != nil {
			return nil, fmt.Errorf("%w: outbox state %q (pending, relay-accepted, expired, unconfirmed, rejected or done)", ErrInvalid, n)
		}
		out = append(out, s)
	}
	return out, nil
}
