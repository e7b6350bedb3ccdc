// Package host is an agentmbx host: its identity and store, its peers and agents, the local
// mailbox, sending and receiving over the LAN and through a relay, delivery receipts, the outbox
// loop and the daemon. *Host implements api.Service (and api.MailService, api.RelayService) on
// the store; the daemon (RunDaemon) serves the same Host on the control socket, so a command
// works the same whether or not a daemon runs.
//
// # Home
//
// A host lives in one directory (ResolveHome: --home, else $MBX_HOME, else
// ~/.local/share/agentmbx), mode 0700:
//
//	host.key       Ed25519 host key, mbx.KeyFile JSON, 0600
//	enc.key        X25519 enc key, mbx.KeyFile JSON, 0600
//	enc.retired    optional: retired enc keys (a JSON array of key files), still tried on open
//	state.db       the bbolt store, 0600: everything else
//	agentmbx.sock  the daemon's control socket, 0600, while it runs
//
// Init creates them (host.key last, so an interrupted init can be run again) and refuses an
// existing identity. Open takes the store's lock; while the daemon holds it, Open fails with
// ErrLocked and commands go through the socket instead.
//
// # Store layout
//
// One bbolt file. Top-level buckets (k1 ‖ 0x00 ‖ k2 keys; names and ids hold no NUL):
//
//	meta      "host", "listen", "created", "schema" (be64), "heard:<host>" (a receipt came from host)
//	peers     host → PeerRecord JSON (host key, enc key, addr, retired keys)
//	agents    name → {name, role, added_at}
//	messages  msg id → the plaintext message (mail received, sent here, and alerts)
//	mbox      agent ‖ msg id → {state, at, note, seq, origin}: one local recipient's copy
//	unread    agent ‖ msg id → "": the copies not yet read (delivered, notified)
//	sent      msg id → where a message sent here went: local agents, hosts, name@host per host
//	rstate    msg id ‖ recipient → the last accepted delivery receipt {host, state, seq, at, note}
//	seen      msg id → {host, at}: received ids, for dedup (kept SeenRetention, 60 days)
//	seen_at   be64(at) ‖ msg id → "": the prune index of seen
//	idx_terms, idx_threads, idx_agent, fresh   the mail indexes (schema 2, index.go): word ‖ msg
//	          id, thread ‖ msg id, agent ‖ msg id (mail an agent holds or sent) and agent ‖ msg id
//	          of copies still delivered (new mail); written with the message, built on opening a
//	          schema 1 store
//	relay     "state" → the pinned relay and what this host knows of it (see Relay below)
//	outbox    the outbox package's buckets (rows, wire bytes and their indexes)
//	quarantine, relay-positions   the quarantine and inbox packages' buckets: relay items this
//	          host refused, and the receive checkpoint per relay
//
// # Addresses
//
// Addresses are read with mbx.ParseAddress. Routing is the host's own (routeAddresses when
// sending, expandIncomingTx when receiving), and differs from mbx.ExpandRecipients on purpose:
// a bare name goes to the local agent of that name and to every paired host (a host does not
// know its peers' agents); * and role:ROLE leave out the sending agent; "owner" is always the
// sending host's owner, never delivered on a receiving host; name@thishost registers the agent
// on first use. Roles are assigned with the agent-name spelling, so a role address in another
// spelling matches no local agent but still goes to every peer.
//
// # Sending
//
// Send validates the request, expands the addresses (see Addresses), builds the envelope, seals it once per target host (mbx.Envelope.Seal),
// and commits in one transaction, shared with concurrent senders through bbolt's Batch: the
// local copies (delivered), the sender's copy, the sent record and one outbox row per host with
// its sealed wire bytes. It answers only after that commit (fsync). The outbox loop sends the
// rows; every retry sends the same bytes.
//
// # Receiving
//
// The LAN server (LANMux) takes POST /v2/envelopes from pinned peers only: the hop is verified
// against the pinned key before anything else; an unpaired host or a bad hop gets 401 and
// nothing is stored. Each envelope is checked (PrepareEnvelope: shape, sending host, signature
// by the current or a retired key, opening with the current then the retired enc keys) and
// committed (CommitEnvelopeTx: dedup by message id, local expansion, mailbox copies, dedup mark,
// delivered receipts queued) in one transaction, and answered accepted, duplicate or
// rejected:<reason>. The relay inbox reuses both functions inside its own transaction (and
// AcceptReceiptTx for receipt items), then calls Wake.
//
// # Delivery states and receipts
//
// A local copy moves forward only: delivered → notified (shown by Inbox or Wait) → read → acked.
// For mail from another host every move signs a T218 receipt (seq increasing per message and
// recipient) and queues it as an outbox row of kind receipt, in the same transaction. The outbox
// loop posts them in batches (POST /v1/receipts). The sending host applies a peer's receipts with
// the acceptReceipt rules (mbx.AcceptReceipt over this store); an accepted one is stored in rstate
// and settles the outbox row to done in the same transaction. Sent shows the result.
//
// # The outbox loop
//
// See pass.go: a pass reads the due rows only, sends each host's rows on its own goroutine over
// a Transport per row (the LAN, or the pinned relay: see relay_send.go), and records outcomes in
// one transaction per host and transport.
// A verified inbound hop from a host makes its rows due at once. A row that ends without
// delivery (72 h, or a rejection) sends its local sender an alert from the pseudo-sender "mbx":
// "Undelivered to <host>: <subject>" with the reason.
//
// # Relay
//
// The relay is the second transport, for peers the LAN does not reach (relay.go and the
// relay_*.go files). The owner pins it (RelaySet: URL and relay key, checked against --key or
// trusted on first use); a served key other than the pinned one stops all relay use until the
// owner confirms the new key with RelaySet again. The daemon enrols with the host key and
// publishes the v2 enc-key ad (daily) and the sender allowlist (the peers' keys, when they
// change), re-enrolling when the relay forgets the host or changes epoch; every publication is
// checked and a refusal shows in RelayStatus.
//
// Sending: a row goes to the relay when the peer has no LAN address, its LAN address did not
// answer lately, or the row's LAN attempts failed twice (a row the relay then did not take tries
// the LAN again next); always when due (next_at). The row's
// persisted wire bytes are pushed, and the row becomes relay-accepted only on an accept statement
// that verifies for that row, checked again in the transaction that records it. It is settled by
// the target's delivery receipt (over the relay or the LAN), or ends unconfirmed at its own
// deadline (accepted_at + retention + 24 h) with an alert, or expired on the relay's signed
// expiry notice. Relay-accepted rows never go over the LAN.
//
// Receiving: an inbox.Receiver per relay pulls pages after the checkpoint and hands each item, in
// seq order, to relayHandler inside the transaction that moves the checkpoint: envelopes through
// PrepareEnvelope and CommitEnvelopeTx (the LAN's receive path), receipts through
// AcceptReceiptTx, expiry notices to the outbox. Refused items go to the quarantine (never
// dropped); those from a host not yet paired are taken when PinPeer pins it. An epoch change or a
// rewind resets the checkpoint to 0 and re-pushes every relay-accepted row still waiting for its
// receipt; a repeated envelope re-sends the current delivery receipts. Receipts to a host reached
// only through the relay go through it too.
//
// Crash tests kill a host at the failpoints host.relay.after-push-before-record (a push answered,
// its outcome not yet recorded) and host.relay.handled-before-commit (an envelope handled inside
// a page's transaction, before the commit); see package failpoint and relay_crash_test.go.
//
// # Caveats
//
//   - Time and randomness are injected (Options.Clock, Options.Rand); the daemon's timers are
//     real, so tests drive passes and sweeps themselves.
//   - LAN addresses come from pairing and cards only; a hop's x-mbx-port hint is never used to
//     redirect mail (a replayed hop could otherwise divert it).
//   - Peers removed with RemovePeer keep their active outbox rows; nothing is sent to them, and
//     the rows end at their deadline with an alert unless the host is pinned again.
package host
