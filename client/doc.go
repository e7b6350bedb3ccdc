// Package client is the SDK for agents and programs that use an agentmbx host: a Client talks to
// the host daemon over the control socket in the host home and implements the api package's
// Service, RelayService, PairingService and CardIssuer, so code written against those interfaces
// works the same on a daemon and on an open store. The server side of the socket is the
// host/control package.
//
// # Using a host
//
//	c, err := client.Dial(ctx, home)
//	if errors.Is(err, client.ErrNoDaemon) {
//		// no daemon: start one (agentmbx daemon), or open the store with host.Open
//	}
//	defer c.Close()
//	res, err := c.Send(ctx, api.SendRequest{From: "alice", To: []string{"bob@desk"}, Body: "hi"})
//
// Send returns once the daemon has made the message durable: every local delivery and every
// outbox row is committed. The returned id names the message in Sent and in the recipients'
// mailboxes.
//
// # Waiting for mail
//
// Wait is a long poll: one request that the daemon answers as soon as the agent has unread mail,
// or with an empty list when the timeout passes. An agent's loop is Wait, then Read each message
// (which marks it read), act, and Ack it with a note. Each state change is reported back to the
// sending host in a signed delivery receipt, which its `agentmbx sent ID` shows.
//
// # Errors
//
// An error the daemon answers comes back as an *Error with the daemon's message, a stable code
// and, often, a hint for a person. errors.Is matches it against the api package's sentinels by
// code (ErrNotFound and the others are here too, the same values). A connection that finds no
// daemon fails with ErrNoDaemon; an answer that cannot be read with ErrProtocol.
//
// # Pairing and the relay
//
// While a daemon runs it holds the store, so LAN pairing and the relay settings go through it:
// StartPairing, WaitPairing (a long poll, no client-side polling), JoinPairing, ConfirmPairing and
// CancelPairing drive the daemon's pairing session; RelayStatus, RelaySet, RelayUnset and
// RelayQuarantine its relay.
package client
