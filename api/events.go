package api

import "context"

// The event route of the control socket, served when the service also implements EventService:
//
//	GET /v1/events ?agent=   → a stream of MailEvent, one JSON object a line (application/x-ndjson)
//
// The answer's status and headers are sent once the subscription is in place, so a caller that
// has them misses no later delivery. The stream ends when the caller leaves or the daemon stops.

// EventService reports deliveries into local mailboxes as they commit, so an agent's tools can
// learn of new mail without polling. host.Service implements it on its mail store,
// client.Client over the control socket.
type EventService interface {
	// MailEvents subscribes to the deliveries into agent's mailbox ("" for every agent's). It
	// returns once the subscription is in place; the channel is closed when ctx ends or the host
	// stops. Events are hints to read the mailbox again, not a log: a subscriber that falls far
	// behind loses events, and the next event it gets counts them in Lost.
	MailEvents(ctx context.Context, agent string) (<-chan MailEvent, error)
}

// MailEvent is one message delivered into one local agent's mailbox (committed).
type MailEvent struct {
	Agent  string `json:"agent"`
	ID     string `json:"id"`
	Thread string `json:"thread"` // the thread the message belongs to (its own id for a new one)
	From   string `json:"from"`
	// Lost counts the events this subscriber missed just before this one (it fell behind).
	Lost int `json:"lost,omitempty"`
}
