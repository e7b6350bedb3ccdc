package host

import (
	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/host/card"
	"github.com/agentmbx/agentmbx/relaylink"
)

// The host's errors are api's (api/hosterrors.go: each names its control-socket code and a hint),
// relaylink's and host/card's, under the names the host has always used. Match them with
// errors.Is.
var (
	ErrExists          = api.ErrHostExists
	ErrNotInitialized  = api.ErrNotInitialized
	ErrLocked          = api.ErrLocked
	ErrSchema          = api.ErrSchema
	ErrCorrupt         = api.ErrCorrupt
	ErrClosed          = api.ErrClosed
	ErrInvalid         = api.ErrInvalid
	ErrUnknownHost     = api.ErrUnknownHost
	ErrNoRecipients    = api.ErrNoRecipients
	ErrReserved        = api.ErrReserved
	ErrNotFound        = api.ErrNotFound
	ErrPeerKeyMismatch = api.ErrPeerKeyMismatch
	ErrPeerKeyInUse    = api.ErrPeerKeyInUse
	ErrSelf            = api.ErrSelf
	ErrUnpaired        = api.ErrUnpaired

	ErrNoRelay          = relaylink.ErrNoRelay
	ErrRelayKeyMismatch = relaylink.ErrRelayKeyMismatch
	ErrRelayUnreachable = relaylink.ErrRelayUnreachable
	ErrRelayStopped     = relaylink.ErrRelayStopped

	ErrCardMalformed = card.ErrMalformed
	ErrCardSignature = card.ErrSignature
	ErrCardFuture    = card.ErrFuture
)

func newErr(code, msg, hint string) *api.CodedError { return api.NewError(code, msg, hint) }
