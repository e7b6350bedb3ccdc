package mailstore

import (
	"context"
	"fmt"
	"sync"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/mbx"
)

// eventBuffer is how many events a subscriber may fall behind before further ones are dropped
// (and counted in the next event's Lost).
const eventBuffer = 256

// hub hands the deliveries of each commit to the subscribers of MailEvents. Publishing never
// blocks the committing writer: an event for a subscriber whose buffer is full is dropped and
// counted, and the next one it gets says how many it lost.
type hub struct {
	mu     sync.Mutex
	subs   map[*subscriber]struct{}
	closed bool
}

type subscriber struct {
	agent string // "" for every agent
	ch    chan api.MailEvent
	lost  int // events dropped since the last one sent
}

func (h *hub) publish(evs []api.MailEvent) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.subs {
		for _, ev := range evs {
			if s.agent != "" && s.agent != ev.Agent {
				continue
			}
			ev.Lost = s.lost
			select {
			case s.ch <- ev:
				s.lost = 0
			default:
				s.lost++
			}
		}
	}
}

func (h *hub) add(s *subscriber) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return false
	}
	if h.subs == nil {
		h.subs = map[*subscriber]struct{}{}
	}
	h.subs[s] = struct{}{}
	return true
}

func (h *hub) remove(s *subscriber) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.subs[s]; ok {
		delete(h.subs, s)
		close(s.ch)
	}
}

func (h *hub) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	for s := range h.subs {
		delete(h.subs, s)
		close(s.ch)
	}
}

// MailEvents subscribes to the deliveries into agent's mailbox ("" for every agent's): one
// api.MailEvent per copy, sent after the transaction that delivered it commits. The
// subscription is in place when MailEvents returns; the channel is closed when ctx ends or the
// store closes. Events are hints to look at the mailbox again, not a log: a subscriber that falls
// eventBuffer events behind loses the next ones, and the next event it gets counts them in Lost.
func (s *Store) MailEvents(ctx context.Context, agent string) (<-chan api.MailEvent, error) {
	if agent != "" && !mbx.ValidAgentName(agent) {
		return nil, fmt.Errorf("host: events: %w: agent name %q", api.ErrInvalid, agent)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	sub := &subscriber{agent: agent, ch: make(chan api.MailEvent, eventBuffer)}
	if !s.events.add(sub) {
		return nil, fmt.Errorf("host: events: %w", api.ErrClosed)
	}
	context.AfterFunc(ctx, func() { s.events.remove(sub) })
	return sub.ch, nil
}

// The store serves the control socket's event stream.
var _ api.EventService = (*Store)(nil)
