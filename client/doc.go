// Package client is the SDK for agents and programs that use an agentmbx host: it talks to the
// host daemon over the control socket in the host home, and it is also the server side of that
// socket (NewHandler), so both ends of the wire live in one place.
//
// # Using a host
//
// Dial the daemon of a home and use the Client as an api.Service:
//
//	c, err := client.Dial(ctx, home)
//	if errors.Is(err, client.ErrNoDaemon) {
//		// no daemon: start one (agentmbx daemon), or open the store with host.Open
//	}
//	defer c.Close()
//	res, err := c.Send(ctx, api.SendRequest{From: "alice", To: []string{"bob@desk"}, Body: "hi"})
//
// Send returns once the daemon has made the message durable: every local delivery and every
// outbox row is committed. The returned id names the message in Sent, and in the recipients'
// mailboxes.
//
// # Waiting for mail
//
// Wait is a long poll: one request that the daemon answers as soon as the agent has unread mail,
// or with an empty list when the timeout passes. An agent's loop is Wait, then Read each message
// (which marks it read), act, and Ack it with a note:
//
//	for {
//		msgs, err := c.Wait(ctx, "bob", 30*time.Second)
//		...
//		for _, m := range msgs {
//			m, err = c.Read(ctx, api.ReadRequest{ID: m.ID, Agent: "bob"})
//			...
//			_, err = c.Ack(ctx, api.AckRequest{ID: m.ID, Agent: "bob", Note: "done"})
//		}
//	}
//
// Each state change (read, acked) is reported back to the sending host in a signed delivery
// receipt, which its `agentmbx sent ID` shows.
//
// # Errors
//
// An error the daemon answers comes back as an *Error with the daemon's message, a stable code
// and, often, a hint for a person. errors.Is matches it against this package's sentinels by code:
// ErrBadRequest, ErrNotFound, ErrConflict, ErrRefused, ErrTooLarge, ErrUnavailable, ErrTimeout,
// ErrInternal. A service implementation classifies its errors for the wire by wrapping those
// sentinels, by implementing Coder on its errors, or by implementing ErrorCoder on the service;
// CodeOf is the default mapping, and the codes, sentinels and HTTP statuses are kept side by side
// in errors.go.
//
// # Pairing
//
// While a daemon runs it holds the store, so LAN pairing runs in the daemon: a handler made with
// WithPairing serves the pairing routes, and the Client's StartPairing, PairingStatus,
// JoinPairing, ConfirmPairing and CancelPairing drive them (this is what `agentmbx pair` and
// `agentmbx join` do when a daemon runs). The session state travels as the service's own JSON
// (host.PairingState).
//
// # Relay
//
// A service that also implements api.RelayService (*host.Host does) answers the relay routes, and
// the Client implements api.RelayService over them: RelayStatus, RelaySet (the daemon fetches the
// relay's info and pins its key), RelayUnset and RelayQuarantine. This is what `agentmbx relay
// set | unset | status | quarantine` use while a daemon runs.
//
// # The wire
//
// HTTP/1.1 on the Unix socket <home>/agentmbx.sock (api.SocketName, mode 0600, so only the host
// owner can use it). Bodies are JSON; the routes are listed in the api package. Requests with
// unknown fields are refused, so a typo in a hand-written request is an error and not a dropped
// field. Beyond the api routes, a daemon whose service can sign host cards (CardIssuer) answers
// GET /v1/card?addr= with its signed card.
package client
