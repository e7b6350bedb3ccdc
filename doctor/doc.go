// Package doctor checks a host and its relay and says what is wrong and how to fix it: the
// identity and file modes, the daemon and its version, each peer (a signed LAN probe, or
// relay-only), the pinned relay (reachable, the key it serves against the pin, the clock,
// enrolment under the current key and epoch, the enc-key ad and the sender allowlist), the
// outbox and the quarantine.
//
// Run works on an api.Service and api.RelayService: the daemon's over its control socket when it
// runs, the store's otherwise, so every check works either way. It talks to the relay and to
// peers itself (relayclient, plain HTTP), never through the daemon.
//
// # Since the last doctor
//
// Rows that ended undelivered (unconfirmed, expired, rejected) are reported when they ended after
// the previous run. The time of each run is kept in the host home, in MarkerFile ({"at": ISO
// time}, 0600), written at the end of every run.
package doctor
