// Package relayserver is the agentmbx relay: an untrusted, durable store-and-forward service that
// carries sealed mail between hosts on different networks. It never sees plaintext: it stores,
// per target host key, the exact wire bytes a sender pushed, numbers them, hands them to the
// target in order and deletes them once the target acknowledges them. Hosts are known by key; a
// host name is only a label. docs/design.md explains the protocol flow, long polling, the bounds
// and the durability rules in full.
//
// # Protocol
//
// A host gets a challenge, signs it and enrols (the EnrolmentAuthority decides; HostKeyAuthority
// by default), then publishes its enc-key ad and, optionally, a sender allowlist. Senders push
// items addressed to target keys; each item is stored for all of its targets or for none, and
// deduplicated per (sender, item id, target). Every accepted or duplicate item is answered with
// a statement signed by the relay key. Targets pull pages in seq order, optionally waiting for
// mail (long polling, bounded per key and in all), and ack what they have durably processed.
// Every request but challenge, enrol, rotate and the enc-key lookup carries a signed relay hop
// (mbx.VerifyRelayHop). The 0.5.x /v1 routes are served too, with 0.5.x's semantics.
//
// # Durability
//
// All state lives behind Store: sqlitestore (one process) or pgstore (several processes on one
// PostgreSQL database); storetest is the contract both pass. A response reports only effects
// whose transaction has committed; concurrent requests share commits. Seqs are
// max(next_seq, now in ms), so they never repeat, even after a restore from an older copy. The
// epoch names the store's generation: a pull or ack naming another one gets 409, and Serve
// rotates the epoch at start when the stored heartbeat is stale.
//
// # Retention
//
// Items expire at acceptance plus retention (14 days by default). Server.RunSweeper, started by
// Serve, deletes expired items in bounded batches (Server.Sweep), keeps their dedup rows as
// tombstones, and queues a signed expiry notice for each expired envelope's sender.
//
// # Identity and bounds
//
// The relay key (LoadKey) comes from MBX_RELAY_KEY or relay.key beside the store; a store
// refuses any key but the first one that served it (ErrRelayKeyMismatch). Everything before a
// verified hop is hostile: hop headers are checked before any body byte is read, bodies are
// capped while streaming and share a relay-wide budget (Options.BodyBudget) charged as bytes
// arrive and shared out per client address and per named key, requests per client address are
// limited (Options.MaxPerClient), pushes over max_batch are refused while streaming, challenges are stateless, and rate limits and quotas
// apply per address, sender, target, account and relay.
//
// # Operations
//
// Every request gets an id its log lines carry. GET /healthz and /readyz report liveness and
// readiness; Metrics holds the Prometheus metrics (Server.OpsHandler, or /metrics behind
// Options.MetricsToken). Serve drains on shutdown: readiness turns 503, held pulls answer,
// requests in flight finish within ServeConfig.ShutdownTimeout, a last heartbeat is written and
// the store closes.
package relayserver
