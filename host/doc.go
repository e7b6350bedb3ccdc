// Package host is an agentmbx host: its identity and store, sending and receiving, delivery
// receipts, the outbox loop and the daemon. Key rotation (package rotation), the local mailboxes
// (host/mailstore), the peers (host/peers) and agents (host/agents), all in the same store, and
// the operators' view (host/ops) are wired in. Host.Service
// is the host on its store (api.Service, api.MailService, api.RelayService); RunDaemon serves the
// same Service on the control socket (package host/control), so a command works the same whether
// or not a daemon runs. LAN pairing (Pairing), the LAN server and transport (LANMux) and the
// relay link (package relaylink, which keeps the relay record and runs the relay loops) are wired
// in here from their own packages.
//
// # Home
//
// A host lives in one directory (ResolveHome: --home, else $MBX_HOME, else
// ~/.local/share/agentmbx), mode 0700: host.key and enc.key (mbx.KeyFile JSON, 0600), optional
// enc.retired, state.db (the bbolt store, 0600) and, while the daemon runs, agentmbx.sock. Init
// creates them (host.key last, so an interrupted init can be run again) and refuses an existing
// identity. Open takes the store's lock; while the daemon holds it, Open fails with api.ErrLocked and
// commands go through the socket instead.
//
// # Sending and receiving
//
// Send validates the request, expands the addresses (mbx.ParseAddress; a bare name goes to the
// local agent and every paired host, * and role:ROLE leave out the sender, owner stays home),
// seals the envelope once per target host and commits, before it answers, the local copies, the
// sent record and one outbox row per host with its sealed bytes. Every retry sends those bytes.
//
// A received envelope is checked (shape, sending host, signature by a current or retired key,
// opening) and committed (dedup by message id, mailbox copies, dedup mark, delivered receipts
// queued) in one transaction, the same way from the LAN and, inside its page's transaction, from
// the relay. A local copy only moves forward (delivered, notified, read, acked), and
// for mail from another host each move queues a signed delivery receipt as an outbox row in the
// same transaction; an accepted receipt settles the sender's row.
//
// # The outbox loop and the relay
//
// A pass reads the due rows, sends each host's rows on its own goroutine through an
// outbox.Sender per row (the LAN, or the pinned relay when the peer has no LAN address, did not
// answer, or failed twice over the LAN), and records the outcomes in one transaction per host and
// transport. A row moves to relay-accepted only on an accept statement that verifies for its
// bytes, and is settled by the target's delivery receipt. A row that ends without delivery (72 h,
// a rejection, or unconfirmed past the relay's retention) leaves an alert from "mbx" in its
// sender's mailbox. Through package relaylink the daemon enrols at the pinned relay, publishes the
// enc-key ad and the sender allowlist, and pulls with long polling; refused relay items go to the
// quarantine. See docs/design.md for the durability rules and the crash windows the tests drill.
//
// Time and randomness are injected (Options.Clock, Options.Rand). LAN addresses come from pairing
// and cards only: a hop's port hint never redirects mail. A removed peer's rows are kept and end
// at their deadline unless it is pinned again.
package host
