// Package relaylink is the host's side of a relay that needs no host store: the Pusher, an
// outbox.Sender that pushes outbox rows and turns the relay's answers (accept statements,
// rejections) into outbox.Outcomes; VerifyAcceptance, the check of an accept statement against
// the row as stored; and Source, the relay client as the Relay an inbox.Receiver pulls from, with
// the client's errors read into the ones the Receiver acts on.
//
// The relay state a host keeps (the pin, enrolment, publications, problems) and the loops that
// use these pieces stay in package host, which owns the store they live in.
package relaylink
