package sqlitestore

// SchemaVersion is the schema this binary writes. Open refuses a store with a higher version and
// migrates a lower one, in one transaction that keeps the epoch.
const SchemaVersion = 2

// migrations[i] takes a store from schema version i to i+1. A new store runs all of them.
var migrations = []string{
	// 0 → 1: the tables of spec §2.
	`
CREATE TABLE meta(
	key   TEXT PRIMARY KEY,
	value TEXT NOT NULL
) WITHOUT ROWID;

CREATE TABLE enrolments(
	host_pubkey   TEXT PRIMARY KEY,
	host_name     TEXT NOT NULL,
	owner_fp      TEXT NOT NULL DEFAULT '',
	account       TEXT,            -- proven account; NULL when the authority proved none
	authorized_by TEXT NOT NULL,
	enrolled_at   INTEGER NOT NULL, -- unix ms
	revoked_at    INTEGER           -- unix ms; never cleared
);
-- A name is unique only inside a proven account, among live rows (names match case-insensitively).
CREATE UNIQUE INDEX enrolments_account_name ON enrolments(account, host_name COLLATE NOCASE)
	WHERE revoked_at IS NULL AND account IS NOT NULL;
CREATE INDEX enrolments_name ON enrolments(host_name COLLATE NOCASE);

CREATE TABLE sender_lists(
	target_pubkey TEXT PRIMARY KEY,
	senders       TEXT NOT NULL,    -- JSON array of sender keys
	iat           INTEGER NOT NULL, -- unix ms
	record        BLOB NOT NULL,    -- the signed list as received
	sig           TEXT NOT NULL
);

CREATE TABLE enc_ads(
	host_pubkey TEXT PRIMARY KEY,
	enc_pub     TEXT NOT NULL,
	sig         TEXT NOT NULL,      -- signature of the v1 ad {v:1, host, enc_pub}
	at          INTEGER NOT NULL
);

-- bytes comes before wire so that scanning sizes never reads the wire's overflow pages.
CREATE TABLE items(
	target_pubkey TEXT NOT NULL,
	seq           INTEGER NOT NULL,
	kind          TEXT NOT NULL,
	item_id       TEXT NOT NULL,
	sender_pubkey TEXT NOT NULL,
	wire_hash     TEXT NOT NULL,
	bytes         INTEGER NOT NULL,
	accepted_at   INTEGER NOT NULL,
	expires_at    INTEGER NOT NULL,
	wire          BLOB NOT NULL,
	PRIMARY KEY(target_pubkey, seq)
);

CREATE TABLE dedup(
	sender_pubkey TEXT NOT NULL,
	item_id       TEXT NOT NULL,
	target_pubkey TEXT NOT NULL,
	wire_hash     TEXT NOT NULL,
	seq           INTEGER NOT NULL,
	accepted_at   INTEGER NOT NULL,
	PRIMARY KEY(sender_pubkey, item_id, target_pubkey)
) WITHOUT ROWID;

CREATE TABLE seqs(
	target_pubkey TEXT PRIMARY KEY,
	next_seq      INTEGER NOT NULL
) WITHOUT ROWID;

CREATE TABLE acked(
	target_pubkey TEXT PRIMARY KEY,
	acked_through INTEGER NOT NULL
) WITHOUT ROWID;
`,
	// 1 → 2: authority strength and org on enrolments, v2 (expiring) enc ads, an indexed allowlist,
	// queue usage counters (so quotas cost O(1) per push), and the indexes the sweep and
	// rotation need.
	`
ALTER TABLE enrolments ADD COLUMN org TEXT NOT NULL DEFAULT '';
ALTER TABLE enrolments ADD COLUMN authority_rank INTEGER NOT NULL DEFAULT 0;

ALTER TABLE enc_ads ADD COLUMN ad BLOB;                       -- the v2 ad as received
ALTER TABLE enc_ads ADD COLUMN ad_sig TEXT NOT NULL DEFAULT '';

CREATE TABLE sender_list_members(
	target_pubkey TEXT NOT NULL,
	sender_pubkey TEXT NOT NULL,
	PRIMARY KEY(target_pubkey, sender_pubkey)
) WITHOUT ROWID;
INSERT OR IGNORE INTO sender_list_members(target_pubkey, sender_pubkey)
	SELECT s.target_pubkey, j.value FROM sender_lists s, json_each(s.senders) j;

-- sender_pubkey '' holds the target's total.
CREATE TABLE usage(
	target_pubkey TEXT NOT NULL,
	sender_pubkey TEXT NOT NULL,
	items         INTEGER NOT NULL,
	bytes         INTEGER NOT NULL,
	PRIMARY KEY(target_pubkey, sender_pubkey)
) WITHOUT ROWID;
INSERT INTO usage(target_pubkey, sender_pubkey, items, bytes)
	SELECT target_pubkey, sender_pubkey, COUNT(*), SUM(bytes) FROM items GROUP BY 1, 2;
INSERT INTO usage(target_pubkey, sender_pubkey, items, bytes)
	SELECT target_pubkey, '', COUNT(*), SUM(bytes) FROM items GROUP BY 1;

CREATE INDEX items_expires ON items(expires_at);
CREATE INDEX dedup_target_seq ON dedup(target_pubkey, seq);
CREATE INDEX dedup_accepted ON dedup(accepted_at);
CREATE INDEX sender_list_members_sender ON sender_list_members(sender_pubkey);
`,
}
