// Package logkey names the attribute keys of agentmbx's structured logs (log/slog), on the host
// and on the relay, so one key means one thing in every package and a log search by key finds
// every line that has it.
package logkey

// Attribute keys.
const (
	Addr         = "addr"          // a LAN address (host:port)
	Agent        = "agent"         // a local agent's name
	Attempts     = "attempts"      // attempts made so far
	AttemptsLeft = "attempts_left" // wrong guesses a pairing token still takes
	Count        = "count"         // how many things an action touched
	Epoch        = "epoch"         // a relay epoch
	Err          = "err"           // the error
	Expires      = "expires"       // when something expires (ISO-8601)
	Fingerprint  = "fingerprint"   // a key fingerprint
	FromEpoch    = "from_epoch"    // the epoch a receive position was reset from
	FromThrough  = "from_through"  // the received_through it was reset from
	From         = "from"          // a request's remote address
	Host         = "host"          // a host's name
	Inviter      = "inviter"       // the inviting host's address (pairing)
	Item         = "item"          // a relay item id
	Kind         = "kind"          // an outbox row's kind (envelope, receipt)
	LastPeer     = "last_peer"     // the last peer a summarized line speaks of
	LastReason   = "last_reason"   // the last reason a summarized line speaks of
	Link         = "link"          // a delivery link: "relay", or "lan:" and a peer host
	Msg          = "msg"           // a message id
	NextAt       = "next_at"       // when a row is due again
	Op           = "op"            // a relay operation (enrol, enc-ad, senders, push, pull)
	Path         = "path"          // a request path
	Peer         = "peer"          // a peer host's name
	Pinned       = "pinned"        // the fingerprint of a pinned key
	Reason       = "reason"        // why something was refused
	Relay        = "relay"         // a relay's URL
	RetryIn      = "retry_in"      // the pause before the next try
	Role         = "role"          // a pairing role (inviter, joiner)
	Row          = "row"           // an outbox row's key
	Seq          = "seq"           // a relay sequence number
	Served       = "served"        // the fingerprint of a key a relay served
	Transport    = "transport"     // lan or relay
	Accepted     = "accepted"      // how many items were accepted
	EncAdExp     = "exp"           // when a published enc-key ad expires
	Held         = "held"          // how many items are still held
	Hosts        = "hosts"         // how many hosts a message went to
	LAN          = "lan"           // the LAN address the daemon serves
	Local        = "local"         // how many local recipients
	Replaced     = "replaced"      // the fingerprint a new pin replaced
	Repush       = "repush"        // how many rows go to the relay again
	Resent       = "resent"        // how many delivery receipts are queued again
	Retry        = "retry"         // whether a rejection is retried
	Sender       = "sender"        // a sending host's key fingerprint
	Senders      = "senders"       // how many keys a sender allowlist names
	Since        = "since"         // when a summarized count started
	Socket       = "socket"        // the control socket's path
	State        = "state"         // a state (of a row, a receipt, a session)
	Step         = "step"          // a pairing step
	Target       = "target"        // a target host key
	Through      = "through"       // the seq an ack reaches
	TOFU         = "tofu"          // whether a relay key was trusted on first use
	Verdict      = "verdict"       // a relay's verdict on a pushed item
	Was          = "was"           // the state something was in before
)

// Attribute keys of the relay and its stores.
const (
	Backup             = "backup"               // a backup file (taken, or a store was restored from)
	Deleted            = "deleted"              // how many old backups were deleted
	Entry              = "entry_id"             // a quarantine entry's id
	Purged             = "purged"               // how many entries a purge deleted
	Before             = "before"               // the time a purge cut at
	NextIn             = "next_in"              // when the next scheduled attempt is
	RestoredAt         = "restored_at"          // when a store was restored
	Ballast            = "ballast"              // the size of a store's reserve file
	DenyEntry          = "entry"                // a deny-list entry
	By                 = "by"                   // the enrolment authority that decided
	DedupPruned        = "dedup_pruned"         // dedup rows a sweep pruned
	DedupPrunedEarly   = "dedup_pruned_early"   // of those, rows pruned at the honest retry horizon
	DedupRows          = "dedup_rows"           // dedup rows (a reclaim deleted, a store holds)
	ReclaimedItems     = "reclaimed_items"      // queued items a reclaim deleted
	ReclaimedBytes     = "reclaimed_bytes"      // their wire bytes
	Dir                = "dir"                  // a store directory
	ExpiredEnvelopes   = "expired_envelopes"    // envelopes a sweep expired
	ExpiredNotices     = "expired_notices"      // expiry notices a sweep expired
	ExpiredReceipts    = "expired_receipts"     // receipts a sweep expired
	Free               = "free"                 // free bytes on a store's disk
	Full               = "full"                 // whether the relay was at its relay-wide limits
	FromSchema         = "from_schema"          // the schema version a store was migrated from
	Heartbeat          = "heartbeat"            // a store's last heartbeat
	Kept               = "kept"                 // where a replaced store was kept
	Key                = "key"                  // the fingerprint of the key a line is about
	KeySource          = "key_source"           // where the relay key came from
	MaxBytes           = "max_bytes"            // a byte cap
	MaxItems           = "max_items"            // an item cap
	Method             = "method"               // an HTTP method
	Moved              = "moved"                // how many items a rotation moved
	MS                 = "ms"                   // a duration in milliseconds
	New                = "new"                  // the new key's fingerprint (rotation)
	Notices            = "notices"              // expiry notices a sweep queued
	Old                = "old"                  // the old key's fingerprint (rotation)
	Pin                = "pin"                  // the command that pins a relay key
	PreviousEpoch      = "previous_epoch"       // the epoch a restore replaced
	Revoked            = "revoked"              // how many enrolments were revoked
	Req                = "req"                  // a request id
	Route              = "route"                // a relay route
	Schema             = "schema"               // a store's schema version
	SkippedNotEnrolled = "skipped_not_enrolled" // notices skipped: sender no longer enrolled
	SkippedOverCap     = "skipped_over_cap"     // notices skipped: sender's queue full
	Status             = "status"               // an HTTP status
	Store              = "store"                // where a relay's store is
	Timeout            = "timeout"              // a bound on waiting
	TrustProxy         = "trust_proxy"          // which proxy headers the relay trusts
	URL                = "url"                  // a URL the relay fetches (an issuer's JWKS)
)
