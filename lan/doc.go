// Package lan is the host-to-host LAN link: the LAN server (NewServer) that takes envelopes and
// delivery receipts from pinned peers, and the LAN transport (NewTransport) that sends outbox rows
// to them. The wire (routes, bodies, limits) is mbx's: see mbx.PathLANEnvelopes.
//
// Every request but the two GETs carries a signed LAN hop (mbx.SignLANHop). The server checks,
// before it reads a body, that the hop headers are there, the timestamp is within the window and
// the named host is a pinned peer (else 401); reads at most mbx.MaxLANBody (else 413) within a
// budget of body bytes in flight (else 503); and verifies the hop against the peer's pinned key
// (else 401). What passes is handed to the Host, which stores it and answers one status per item;
// the server stores nothing itself. Served through Handler by NewHTTPServer (header, idle and
// request timeouts) on a listener wrapped by Limit, it holds at most ServerOptions.MaxConns
// connections, at most ServerOptions.MaxConnsPerAddr of them from one client address; refused
// requests are logged at most once a minute, with their count. The pairing server of `agentmbx
// pair` without a daemon is served the same way (LimitListener).
//
// The transport sends a peer's envelopes in batches that fit the receiver's caps, and its
// receipts in batches of mbx.ReceiptBatchMax, and turns the answers into outbox.Outcomes: a
// batch refused as too large or malformed is split to find the one item the peer cannot take; an
// attempt that got no answer at all is marked Unreachable. It records nothing: the outbox loop
// does.
//
// Around them: a daemon's LAN listener (Binding: bound with jittered backoff while the port is
// taken, the rest of the daemon serving meanwhile) and the probe of a silent peer (Probe: its
// status, asked of its address; the host's reachability tracker, package host/reach, decides when).
package lan
