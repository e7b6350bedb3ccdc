package api

import "context"

// The outbox routes of the control socket, served when the service also implements
// OutboxService:
//
//	POST /v1/outbox/retry  RetryRequest                  → RetryResult
//	GET  /v1/outbox/page   ?state=&state=&all=1&limit=   → OutboxPage

// MaxRetryIDs caps the message ids one RetryRequest names.
const MaxRetryIDs = 1000

// OutboxService is the part of the outbox beyond listing it. *host.Host implements it on the
// store, client.Client over the control socket.
type OutboxService interface {
	// RetryOutbox makes outbox rows that wait in backoff due now: the rows of the named messages,
	// or every waiting row with All. Attempts are kept. A message with no row that can be retried
	// (unknown, delivered, or waiting at the relay for its receipt) is ErrNotFound, and then
	// nothing changes.
	RetryOutbox(ctx context.Context, req RetryRequest) (RetryResult, error)
	// OutboxPage lists the newest Limit rows of the states asked for, oldest first (by creation),
	// and how many older ones it left out.
	OutboxPage(ctx context.Context, req OutboxRequest) (OutboxPage, error)
}

// OutboxRequest asks for one page of the outbox: rows in one of States (wire names, like
// "pending"); with no States, the active ones (pending, relay-accepted), or every row with All.
// Limit 0 is DefaultPage; at most MaxPage.
type OutboxRequest struct {
	States []string `json:"states,omitempty"`
	All    bool     `json:"all,omitempty"`
	Limit  int      `json:"limit,omitempty"`
}

// OutboxStates returns the wire names of the outbox row states in their forward order; the
// first two are the active ones, the other four the final ones.
func OutboxStates() []string {
	return []string{"pending", "relay-accepted", "expired", "unconfirmed", "rejected", "done"}
}

// OutboxPage is a page of outbox rows, oldest first. More counts the matching rows it left out.
type OutboxPage struct {
	Rows []OutboxRow `json:"rows"`
	More int         `json:"more"`
}

// RetryRequest names the rows to retry: the message ids, or All (not both).
type RetryRequest struct {
	IDs []string `json:"ids,omitempty"`
	All bool     `json:"all,omitempty"`
}

// RetryResult says how many rows became due now, and how many were due already.
type RetryResult struct {
	Due     int `json:"due"`
	Already int `json:"already_due"`
}
