package api

import "context"

// The outbox routes of the control socket, served when the service also implements
// OutboxService:
//
//	POST /v1/outbox/retry  RetryRequest  → RetryResult

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
