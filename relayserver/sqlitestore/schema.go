package sqlitestore

// SchemaVersion is the schema this binary writes. Open refuses a store with a higher version and
// migrates a lower one, in one transaction that keeps the epoch.
const SchemaVersion = 7

// migrations[i] takes a store from schema version i to i+1. A new store runs all of them.
var migrations = []string{
	// 0 → 1: the tables of docs/design.md: The relay store.
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
	// 2 → 3: the per-item tables name host keys by a small integer (keys.id) instead of 44
	// characters of base64 each, store wire hashes as 32 raw bytes instead of 64 hex digits, and
	// keep items in their primary key's b-tree (WITHOUT ROWID) instead of a table plus an index:
	// about half the bytes per stored item. A trigger on items writes the dedup row, the seq
	// counter and the usage counters, so queueing an item is one statement.
	`
CREATE TABLE keys(
	id     INTEGER PRIMARY KEY,
	pubkey TEXT NOT NULL UNIQUE
);
INSERT OR IGNORE INTO keys(pubkey)
	SELECT target_pubkey FROM items UNION SELECT sender_pubkey FROM items
	UNION SELECT target_pubkey FROM dedup UNION SELECT sender_pubkey FROM dedup;

-- wire_hash holds 32 raw bytes (a hash that is not 64 lowercase hex digits stays text).
CREATE TABLE items_v3(
	target      INTEGER NOT NULL, -- keys.id
	seq         INTEGER NOT NULL,
	kind        TEXT NOT NULL,
	item_id     TEXT NOT NULL,
	sender      INTEGER NOT NULL, -- keys.id
	wire_hash   BLOB NOT NULL,
	bytes       INTEGER NOT NULL,
	accepted_at INTEGER NOT NULL,
	expires_at  INTEGER NOT NULL,
	wire        BLOB NOT NULL,
	PRIMARY KEY(target, seq)
) WITHOUT ROWID;
INSERT INTO items_v3(target, seq, kind, item_id, sender, wire_hash, bytes, accepted_at, expires_at, wire)
	SELECT t.id, i.seq, i.kind, i.item_id, s.id,
		CASE WHEN length(i.wire_hash) = 64 AND i.wire_hash NOT GLOB '*[^0-9a-f]*'
			THEN unhex(i.wire_hash) ELSE i.wire_hash END,
		i.bytes, i.accepted_at, i.expires_at, i.wire
	FROM items i JOIN keys t ON t.pubkey = i.target_pubkey JOIN keys s ON s.pubkey = i.sender_pubkey;
DROP TABLE items;
ALTER TABLE items_v3 RENAME TO items;
CREATE INDEX items_expires ON items(expires_at);

CREATE TABLE dedup_v3(
	sender      INTEGER NOT NULL, -- keys.id
	item_id     TEXT NOT NULL,
	target      INTEGER NOT NULL, -- keys.id
	wire_hash   BLOB NOT NULL,
	seq         INTEGER NOT NULL,
	accepted_at INTEGER NOT NULL,
	PRIMARY KEY(sender, item_id, target)
) WITHOUT ROWID;
INSERT INTO dedup_v3(sender, item_id, target, wire_hash, seq, accepted_at)
	SELECT s.id, d.item_id, t.id,
		CASE WHEN length(d.wire_hash) = 64 AND d.wire_hash NOT GLOB '*[^0-9a-f]*'
			THEN unhex(d.wire_hash) ELSE d.wire_hash END,
		d.seq, d.accepted_at
	FROM dedup d JOIN keys t ON t.pubkey = d.target_pubkey JOIN keys s ON s.pubkey = d.sender_pubkey;
DROP TABLE dedup;
ALTER TABLE dedup_v3 RENAME TO dedup;
CREATE INDEX dedup_target_seq ON dedup(target, seq);
CREATE INDEX dedup_accepted ON dedup(accepted_at);

-- Queueing an item (InsertItem) also writes its dedup row (a repeat of (sender, item id,
-- target) fails the whole statement, so nothing changes), advances the target's seq counter
-- and counts the item in the usage counters. Rotation moves items with UPDATE and recounts.
CREATE TRIGGER items_queued AFTER INSERT ON items BEGIN
	INSERT INTO dedup(sender, item_id, target, wire_hash, seq, accepted_at)
		VALUES(NEW.sender, NEW.item_id, NEW.target, NEW.wire_hash, NEW.seq, NEW.accepted_at);
	INSERT INTO seqs(target_pubkey, next_seq) SELECT pubkey, NEW.seq + 1 FROM keys WHERE id = NEW.target
		ON CONFLICT(target_pubkey) DO UPDATE SET next_seq = excluded.next_seq;
	INSERT INTO usage(target_pubkey, sender_pubkey, items, bytes)
		SELECT pubkey, '', 1, NEW.bytes FROM keys WHERE id = NEW.target
		ON CONFLICT(target_pubkey, sender_pubkey) DO UPDATE SET items = items + 1, bytes = bytes + excluded.bytes;
	INSERT INTO usage(target_pubkey, sender_pubkey, items, bytes)
		SELECT t.pubkey, s.pubkey, 1, NEW.bytes FROM keys t, keys s WHERE t.id = NEW.target AND s.id = NEW.sender
		ON CONFLICT(target_pubkey, sender_pubkey) DO UPDATE SET items = items + 1, bytes = bytes + excluded.bytes;
END;
`,
	// 3 → 4: the operator's deny list, and on enrolments the client_id an account token proved
	// and when the deny list revoked the enrolment (cleared by a new enrolment).
	`
ALTER TABLE enrolments ADD COLUMN client_id TEXT NOT NULL DEFAULT '';
ALTER TABLE enrolments ADD COLUMN denied_at INTEGER; -- unix ms
CREATE INDEX enrolments_client ON enrolments(client_id) WHERE client_id <> '';

CREATE TABLE deny(
	kind     TEXT NOT NULL,    -- fingerprint or client_id
	value    TEXT NOT NULL,
	added_at INTEGER NOT NULL, -- unix ms
	until    INTEGER NOT NULL, -- unix ms; 0 until removed
	note     TEXT NOT NULL,
	PRIMARY KEY(kind, value)
) WITHOUT ROWID;
`,
	// 4 → 5: queueing an item writes its dedup row and the item, two plain inserts; the seq
	// counter and the usage counters are kept in memory by the writer and written once per
	// transaction (counters.go), instead of four more statements per item in a trigger.
	`
DROP TRIGGER items_queued;
`,
	// 5 → 6: every dedup row is charged to its sender (relayserver.Options.MaxSenderDedup and
	// the relay-wide limit): the usage row ('', sender) counts the sender's dedup rows in items.
	// A deny entry may ask the relays to reclaim what the store holds for the keys it revoked.
	`
INSERT INTO usage(target_pubkey, sender_pubkey, items, bytes)
	SELECT '', k.pubkey, COUNT(*), 0 FROM dedup d JOIN keys k ON k.id = d.sender GROUP BY d.sender;
ALTER TABLE deny ADD COLUMN reclaim_at INTEGER NOT NULL DEFAULT 0;   -- unix ms; 0: never asked
ALTER TABLE deny ADD COLUMN reclaimed_at INTEGER NOT NULL DEFAULT 0; -- unix ms; 0: never done
ALTER TABLE deny ADD COLUMN reclaimed TEXT NOT NULL DEFAULT '';      -- JSON of what it deleted
`,
	// 6 → 7: when the account rights an enrolment's authority proved end (an account token's
	// exp), unix ms; NULL: they do not.
	`
ALTER TABLE enrolments ADD COLUMN auth_until INTEGER;
`,
}
