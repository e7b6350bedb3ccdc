package api

import "context"

// The id route of the control socket, served when the service also implements IDResolver:
//
//	GET /v1/resolve   ?prefix=   → ResolveAnswer

// MinIDPrefix is the shortest message id prefix a host resolves: the first ten characters of a
// ULID are its time in milliseconds, so shorter prefixes name whole time spans.
const MinIDPrefix = 8

// IDResolver turns a message id prefix, as the commands show ids (like git's short hashes),
// into the one full id it begins: ErrNotFound when no message this host holds or sent begins
// with it, ErrConflict (with the candidates in the message) when several do.
type IDResolver interface {
	ResolveID(ctx context.Context, prefix string) (string, error)
}

// ResolveAnswer is the answer of GET /v1/resolve.
type ResolveAnswer struct {
	ID string `json:"id"`
}
