// Package relayserver is the agentmbx relay: an untrusted, durable store-and-forward service that
// carries sealed mail between hosts on different networks (docs/design.md: The relay store).
//
// The relay never sees plaintext. It stores, for each target host key, the exact wire bytes a
// sender pushed, numbers them, hands them to the target in order, and deletes them once the target
// acknowledges them. Hosts are identified by key; a host name is only a label.
//
// # Protocol flow
//
//  1. A host asks for a challenge (POST /v1/relay/challenge {host, pubkey}), signs it with its host
//     key and enrols (POST /v1/relay/enrol). The EnrolmentAuthority decides (HostKeyAuthority by
//     default; a stronger one can prove an account, which quotas and name uniqueness then use).
//  2. It publishes its enc-key ad (POST /v2/relay/enc-key) and, optionally, the allowlist of sender
//     keys it accepts (POST /v2/relay/senders).
//  3. A sender pushes items (POST /v2/relay/items), each addressed to target keys with the wire
//     bytes sealed for each target. Every item is one atomic unit: all of its targets are checked
//     (enrolled, not revoked, allowlist, quotas, size, no repeated target) and stored, or nothing
//     is. Dedup is per (sender, item id, target): the same bytes again are a duplicate with the
//     original seq; other bytes under the same id are rejected:conflict. The answer carries, per
//     item, a status and, for accepted and duplicate items, the relay's signed accept statement.
//     HTTP 200 only means the results are in the body.
//  4. The target pulls pages (GET /v2/relay/items?after=&limit=&epoch=) and acknowledges
//     (POST /v2/relay/ack {epoch, through}) what it has durably processed.
//
// Every request but challenge, enrol, rotate and the enc-key lookup carries a signed relay hop over
// the method, the path with its query, the timestamp and the full body (mbx.VerifyRelayHop),
// found by x-mbx-key.
//
// # Long polling
//
// A pull may add wait=<seconds> (cut to Options.MaxWait, 30 s by default, announced in
// /v2/relay/info as limits.max_wait; 0.5.x clients never send it and ignore the field). When the
// page would be empty the relay holds the request until a transaction that queues an item for
// the caller has committed, then reads again and answers; or until the wait passes (the same empty
// page as without wait); or until the client goes away; or until the server shuts down (Shutdown,
// which Serve calls first, answers every held pull at once). A pull registers before it reads, and
// a wake is sent only after the commit that holds the item, so no item committed after the read
// is missed and the read after a wake sees it. Held pulls are bounded: Options.MaxWaitingPerKey
// per host key (a newer pull of the key evicts the oldest, which answers at once) and
// Options.MaxWaiting in all (past it a pull answers at once, as without wait). A pull woken by a
// rotation that revoked its own key answers 403.
//
// # Durability
//
// All state lives behind the Store interface (sqlitestore, or pgstore for several relay processes
// on one PostgreSQL database; storetest is the contract both pass). A response that
// reports an effect is written only after the transaction holding it committed; concurrent
// requests share commits (group commit) without losing per-item atomicity. Sequence numbers are
// max(next_seq, now in ms), so they never repeat, even after a restore from an older copy. The
// epoch names the store generation; a pull or ack naming another epoch gets 409 with the current
// one, and Serve rotates the epoch at start when the stored heartbeat is stale (a restore or a
// long outage).
//
// # Backup and restore
//
// sqlitestore.Backup (agentmbx relay backup FILE) copies the store online with SQLite's VACUUM
// INTO: one read snapshot, without the store's lock, which under WAL never holds up the running
// relay's writer; the copy is checked, made 0600, fsynced and renamed into place. It holds every
// item whose push was answered before it started. sqlitestore.Restore (agentmbx relay restore FILE)
// takes the lock without waiting (ErrLocked while a relay serves), refuses a file that is not a
// relay store (ErrBadBackup), has a newer schema (ErrSchemaTooNew) or belongs to another relay key
// than the store's or relay.key's (ErrRelayKeyMismatch, unless forced), then renames a prepared
// copy over relay.db with a new epoch, restored_at and restored_from in meta, and each target's
// next_seq raised to the replaced store's, so new items land above every seq handed out before even
// when the clock has not moved. The replaced database stays as relay.db.pre-restore, with its -wal
// and -shm beside it. agentmbx relay
// rotate-epoch gives a stopped store a new epoch (after a restore made any other way). Hosts that
// see the new epoch re-push and re-pull (docs/design.md: Epochs, restarts and restores).
//
// # Retention
//
// Every item carries expires_at = accepted_at + retention (limits.retention_days, 14 by
// default). RunSweeper (started by Serve, stopped before the store closes; Options.SweepEvery,
// a minute by default, with an injectable ticker) calls Sweep, which in one transaction deletes
// up to Options.SweepBatch expired items, running further batches at once while a batch was full.
// An expired item's dedup row stays as a tombstone, so a late retry is a duplicate and is never
// delivered after expiry. For each expired envelope the sweep queues for its sender a kind
// "expired" item: canonical({notice, sig}) with notice {v:1, type:"relay-expired", item_id,
// target_pubkey, accepted_at, expired_at} signed by the relay key, sender the relay key, item id
// mbx.ExpiryNoticeItemID, with its own seq, dedup row and retention. Notices are exempt from
// sender shares but not from the sender's own queue caps; a sender whose key is no longer live
// or whose queue is full is skipped and counted (mbx.SweepReport), since its own deadline alerts
// it. Expired receipts and expired notices go without notice. Pulls parked for senders that got
// notices are woken after the commit.
//
// Dedup rows are kept for the dedup horizon (retention + 7 days) after their item was acked or
// expired. The store does not record when an item was acked, so a row goes once its item is no
// longer queued and it was accepted more than 2 × retention + 7 days ago: never earlier than the
// horizon (an item is acked or expired at the latest one retention after acceptance), at most
// one retention later. A retry after that is a new item.
//
// # Identity
//
// The relay key (LoadKey) comes from MBX_RELAY_KEY or relay.key beside the store, generated on
// first start. A store is bound to the first key that serves it and refuses any other
// (ErrRelayKeyMismatch). Errors never contain key material.
//
// # Bounds
//
// Everything before a verified hop is hostile (admission.go, budget.go). A hop's key, timestamp
// window and enrolment are checked from its headers before any body byte is read: an unknown key
// gets 401 at once. Bodies grow as bytes arrive, never sized from Content-Length, within a
// relay-wide budget of body bytes in flight (Options.BodyBudget; a declared length counts before
// reading) and a limit of requests in flight per client address (Options.MaxPerClient): past
// either, 503 with Retry-After, unread, and the connection closes. Bodies are capped while
// streaming (413, nothing stored): small ones for challenge, enrol, rotate, ack and enc-key,
// 64 KiB for an allowlist.
//
// Enrolment challenges are stateless (challenge.go): an HMAC of the key and an expiry under the
// store's secret (Store.ChallengeSecret), checked against the challenges open for the key, so no
// table fills and nothing is consumed before the signature verifies. Challenge, enrol and rotate
// calls are rate-limited per client address (behind a proxy: the rightmost X-Forwarded-For entry
// with TrustXFF, CF-Connecting-IP with TrustCloudflare), an IPv6 address at /64, /56 and /48
// (ratelimit.go: token buckets in a bounded LRU that forgets only a refilled bucket); new host
// keys per address per day too; pushes per sender key. Quotas apply per target, per sender per
// target, per proven account, and to the relay as a whole (capacity.go: quota:relay, also while
// the store's disk is full, a SpaceReporter). httperr.go maps every error to its status.
//
// # Operations
//
// ops.go gives every request an id (X-Request-Id: a proxy's short token, else made here) that
// its log lines carry, serves GET /healthz (the process answers) and GET /readyz (the epoch is
// loaded, the heartbeat was written within three intervals, the store takes a write now, the
// server is not shutting down; 503 otherwise), and counts requests by route and status.
// metrics.go holds the Prometheus metrics (Options.Metrics, served by Metrics.Handler, by
// OpsHandler on a private listener, or at /metrics behind Options.MetricsToken): the handlers
// call nil-safe hooks, and the queue gauges come from the Store's QueueStats when scraped (at
// most once a second). Serve drains on shutdown: readiness turns 503, parked pulls answer, the
// listener stops accepting, requests in flight finish within ServeConfig.ShutdownTimeout, a last
// heartbeat is written, then the sweeper stops and the store closes.
//
// # Caveats
//
// A push or rotation whose client goes away once its unit is queued still waits for the unit's
// outcome (and commits it, unanswered: the client's retry is a duplicate), so a commit always
// wakes the pulls held for it. A store that several relay processes share (a Notifier)
// passes on the commits of the others, so their pushes wake this one's pulls too.
//
// A notice goes to the sender key that pushed the envelope: a sender that rotated its key since
// gets none (its old key is revoked) and relies on its own deadline.
//
// Not built yet: the v1 message endpoints (/v1/relay/messages).
package relayserver
