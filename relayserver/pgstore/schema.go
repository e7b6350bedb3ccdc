package pgstore

// SchemaVersion is the schema this binary writes. Open refuses a database with a higher version
// and migrates a lower one, in one transaction.
const SchemaVersion = 4

// migrations[i] takes a database from schema version i to i+1. A new database runs all of them.
// Times are unix milliseconds (bigint), as in the SQLite store.
var migrations = []string{
	// 0 → 1: the tables of the relay store.
	`
CREATE TABLE meta(
	key   text PRIMARY KEY,
	value text NOT NULL
);

CREATE TABLE enrolments(
	host_pubkey    text PRIMARY KEY,
	host_name      text NOT NULL,
	owner_fp       text NOT NULL DEFAULT '',
	account        text,             -- proven account; NULL when the authority proved none
	org            text NOT NULL DEFAULT '',
	authorized_by  text NOT NULL,
	authority_rank integer NOT NULL DEFAULT 0,
	enrolled_at    bigint NOT NULL,
	revoked_at     bigint            -- never cleared
);
-- A name is unique only inside a proven account, among live rows, case-insensitively.
CREATE UNIQUE INDEX enrolments_account_name ON enrolments(account, lower(host_name))
	WHERE revoked_at IS NULL AND account IS NOT NULL;
CREATE INDEX enrolments_name ON enrolments(lower(host_name)) WHERE revoked_at IS NULL;
CREATE INDEX enrolments_live_account ON enrolments(account) WHERE revoked_at IS NULL;

CREATE TABLE sender_lists(
	target_pubkey text PRIMARY KEY,
	senders       text NOT NULL,     -- JSON array of sender keys, as published
	iat           bigint NOT NULL,
	record        bytea NOT NULL,    -- the signed list as received
	sig           text NOT NULL
);
CREATE TABLE sender_list_members(
	target_pubkey text NOT NULL,
	sender_pubkey text NOT NULL,
	PRIMARY KEY(target_pubkey, sender_pubkey)
);
CREATE INDEX sender_list_members_sender ON sender_list_members(sender_pubkey);

CREATE TABLE enc_ads(
	host_pubkey text PRIMARY KEY,
	enc_pub     text NOT NULL,
	sig         text NOT NULL,       -- signature of the v1 ad
	at          bigint NOT NULL,
	ad          bytea,               -- the v2 ad as received
	ad_sig      text NOT NULL DEFAULT ''
);

-- The counter row of a target: a writer allocates a seq only while it holds this row (FOR
-- UPDATE), inside the transaction that commits the item.
CREATE TABLE seqs(
	target_pubkey text PRIMARY KEY,
	next_seq      bigint NOT NULL
);
CREATE TABLE acked(
	target_pubkey text PRIMARY KEY,
	acked_through bigint NOT NULL
);

CREATE TABLE items(
	target_pubkey text NOT NULL,
	seq           bigint NOT NULL,
	kind          text NOT NULL,
	item_id       text NOT NULL,
	sender_pubkey text NOT NULL,
	wire_hash     text NOT NULL,
	bytes         bigint NOT NULL,
	accepted_at   bigint NOT NULL,
	expires_at    bigint NOT NULL,
	wire          bytea NOT NULL,
	PRIMARY KEY(target_pubkey, seq)
);
CREATE INDEX items_expires ON items(expires_at);

CREATE TABLE dedup(
	sender_pubkey text NOT NULL,
	item_id       text NOT NULL,
	target_pubkey text NOT NULL,
	wire_hash     text NOT NULL,
	seq           bigint NOT NULL,
	accepted_at   bigint NOT NULL,
	PRIMARY KEY(sender_pubkey, item_id, target_pubkey)
);
CREATE INDEX dedup_target_seq ON dedup(target_pubkey, seq);
CREATE INDEX dedup_accepted ON dedup(accepted_at);

-- Queue counters, so quotas cost O(1) per push; sender_pubkey '' holds the target's total.
CREATE TABLE usage(
	target_pubkey text NOT NULL,
	sender_pubkey text NOT NULL,
	items         bigint NOT NULL,
	bytes         bigint NOT NULL,
	PRIMARY KEY(target_pubkey, sender_pubkey)
);
`,
	// 1 → 2: the operator's deny list, and on enrolments the client_id an account token proved
	// and when the deny list revoked the enrolment (cleared by a new enrolment).
	`
ALTER TABLE enrolments ADD COLUMN client_id text NOT NULL DEFAULT '';
ALTER TABLE enrolments ADD COLUMN denied_at bigint;
CREATE INDEX enrolments_client ON enrolments(client_id) WHERE client_id <> '';

CREATE TABLE deny(
	kind     text NOT NULL,
	value    text NOT NULL,
	added_at bigint NOT NULL,
	until    bigint NOT NULL, -- 0: until removed
	note     text NOT NULL,
	PRIMARY KEY(kind, value)
);
`,
	// 2 → 3: every dedup row is charged to its sender (relayserver.Options.MaxSenderDedup and
	// the relay-wide limit): the usage row ('', sender) counts the sender's dedup rows in items.
	// A deny entry may ask the relays to reclaim what the store holds for the keys it revoked.
	`
INSERT INTO usage(target_pubkey, sender_pubkey, items, bytes)
	SELECT '', sender_pubkey, count(*), 0 FROM dedup GROUP BY sender_pubkey;
ALTER TABLE deny ADD COLUMN reclaim_at bigint NOT NULL DEFAULT 0;   -- 0: never asked
ALTER TABLE deny ADD COLUMN reclaimed_at bigint NOT NULL DEFAULT 0; -- 0: never done
ALTER TABLE deny ADD COLUMN reclaimed text NOT NULL DEFAULT '';     -- JSON of what it deleted
`,
	// 3 → 4: when the account rights an enrolment's authority proved end (an account token's
	// exp), unix ms; NULL: they do not.
	`
ALTER TABLE enrolments ADD COLUMN auth_until bigint;
`,
}
