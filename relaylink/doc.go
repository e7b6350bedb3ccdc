// Package relaylink is a host's side of its pinned relay.
//
//   - Link: everything the host does with the relay. It keeps the relay record in the host's
//     store (the pin, the epoch last seen, what the Keeper learned, a served key that differs
//     from the pin, the last failure of each operation), answers the owner's commands
//     (api.RelayService: RelaySet, RelayUnset, RelayStatus, RelayQuarantine), hands out the
//     connection, Pusher and Receiver the outbox loop and the daemon use, pauses pushes when the
//     relay asks to slow down, and runs the daemon's relay loops (Run).
//   - Keeper: enrolment and publications. It reads the relay's info, enrols the host key when
//     the relay does not know it (or the epoch changed), and publishes the enc-key ad and the
//     sender allowlist when due, recording each outcome through the host's hooks.
//   - Pusher: an outbox.Sender that pushes rows' stored bytes and turns the relay's answers
//     (accept statements, rejections) into outbox.Outcomes; VerifyAcceptance is the check of an
//     accept statement against the row as stored, repeated where the outcome is recorded.
//   - Pacer: the one way a Link's Pushers reach the relay: a token bucket under the relay's
//     announced pushes_per_minute, and rows handed in while a push is in flight coalesced into
//     the next request (pace.go).
//   - Source: the relay client as the Relay a checkpoint.Receiver pulls from, with the client's
//     errors read into the ones the Receiver acts on (ReceiverError).
//
// The relay items a Receiver pulls are handled inside the transaction of their page: receipts
// and expiry notices here, envelopes by the host's own receive path (Host.Envelope). The host
// gives a Link its peers, that mailbox commit, its alerts and ways to wake its loops (Host).
package relaylink
