// Package relaylink is the host's side of a relay, the parts that need no host store:
//
//   - Keeper: enrolment and publications. It reads the relay's info, enrols the host key when
//     the relay does not know it (or the epoch changed), and publishes the enc-key ad and the
//     sender allowlist when due, recording each outcome through the host's hooks.
//   - Pusher: an outbox.Sender that pushes rows' stored bytes and turns the relay's answers
//     (accept statements, rejections) into outbox.Outcomes; VerifyAcceptance is the check of an
//     accept statement against the row as stored, repeated where the outcome is recorded.
//   - Source: the relay client as the Relay an inbox.Receiver pulls from, with the client's
//     errors read into the ones the Receiver acts on (ReceiverError).
//
// The relay record a host keeps (the pin, what the Keeper learned, problems), the receive
// handler that stores items in the host's mailboxes, and the daemon's loops stay in package
// host, which owns the store they live in.
package relaylink
