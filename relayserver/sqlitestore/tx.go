package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/agentmbx/agentmbx/relayserver"
	"github.com/agentmbx/agentmbx/relayserver/internal/storekit"
)

// tx is the relayserver.Tx of the writer: every call runs on the writer connection inside the
// open group transaction.
type tx struct {
	q      *stmtCache
	depth  int
	broken error
	// savepoints: the writer's top-level units run in savepoints too (see writer.group).
	savepoints bool
	// keys caches committed key ids; fresh names the keys this transaction added (keyID).
	keys  *writerKeys
	fresh map[string]bool
	// c holds the committed queue counters, p what this transaction changed (counters.go).
	c *counters
	p pending
	// ec is the enrolment cache of the readers, which holds committed enrolments only: the writer
	// takes from it while this transaction has not written the enrolments table.
	ec *enrolCache
	// inserted counts the items InsertItem queued in this transaction (the writer's group cap).
	inserted int
}

var bg = context.Background()

// savepoint is the SQL of the savepoint statements of one nesting depth. The writer's statement
// cache prepares each once.
type savepoint struct{ begin, rollback, release string }

func makeSavepoint(depth int) savepoint {
	n := "u" + strconv.Itoa(depth)
	return savepoint{"SAVEPOINT " + n, "ROLLBACK TO " + n, "RELEASE " + n}
}

// savepoints holds the usual depths, so a unit builds no strings.
var savepoints = func() []savepoint {
	sp := make([]savepoint, 8)
	for i := range sp {
		sp[i] = makeSavepoint(i)
	}
	return sp
}()

func savepointAt(depth int) savepoint {
	if depth < len(savepoints) {
		return savepoints[depth]
	}
	return makeSavepoint(depth)
}

// Unit implements relayserver.Tx with a savepoint.
func (t *tx) Unit(fn func(relayserver.Tx) error) (err error) {
	if t.broken != nil {
		return t.broken
	}
	t.depth++
	defer func() { t.depth-- }()
	sp := savepointAt(t.depth)
	if _, err := t.q.ExecContext(bg, sp.begin); err != nil {
		return fmt.Errorf("savepoint: %w", err)
	}
	m := t.mark()
	err = t.call(fn)
	if err != nil {
		if _, rerr := t.q.ExecContext(bg, sp.rollback); rerr != nil {
			t.broken = fmt.Errorf("%w: %v", errBroken, rerr)
			return err
		}
		t.rollbackTo(m)
	}
	if _, rerr := t.q.ExecContext(bg, sp.release); rerr != nil {
		t.broken = fmt.Errorf("%w: %v", errBroken, rerr)
		if err == nil {
			err = rerr
		}
	}
	if t.depth == 1 {
		t.p.undo = t.p.undo[:0] // no savepoint left to roll back to
	}
	return err
}

// call runs fn, turning a panic into its error.
func (t *tx) call(fn func(relayserver.Tx) error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("unit panicked: %v", p)
		}
	}()
	return fn(t)
}

func getEnrolment(ctx context.Context, q querier, pubkey string) (relayserver.Enrolment, error) {
	return storekit.ScanEnrolment(q.QueryRowContext(ctx,
		"SELECT "+storekit.EnrolmentCols+" FROM enrolments WHERE host_pubkey = ?", pubkey), sql.ErrNoRows)
}

func (t *tx) Enrolment(pubkey string) (relayserver.Enrolment, error) {
	e, err := getEnrolment(bg, t.q, pubkey)
	if err != nil && !errors.Is(err, relayserver.ErrNotFound) {
		return e, fmt.Errorf("enrolment: %w", err)
	}
	return e, err
}

func (t *tx) PutEnrolment(e relayserver.Enrolment) error {
	_, err := t.q.ExecContext(bg, `
INSERT INTO enrolments(host_pubkey, host_name, owner_fp, account, org, authorized_by, authority_rank,
	enrolled_at, revoked_at, client_id, denied_at, auth_until)
VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT(host_pubkey) DO UPDATE SET host_name = excluded.host_name, owner_fp = excluded.owner_fp,
	account = excluded.account, org = excluded.org, authorized_by = excluded.authorized_by,
	authority_rank = excluded.authority_rank, enrolled_at = excluded.enrolled_at,
	revoked_at = COALESCE(enrolments.revoked_at, excluded.revoked_at),
	client_id = excluded.client_id, denied_at = excluded.denied_at, auth_until = excluded.auth_until`,
		e.HostPubkey, e.HostName, e.OwnerFP, storekit.NullStr(e.Account), e.Org, e.AuthorizedBy,
		e.AuthorityRank, storekit.MS(e.EnrolledAt), storekit.NullMS(e.RevokedAt), e.ClientID, storekit.NullMS(e.DeniedAt),
		storekit.NullMS(e.AuthUntil))
	if err != nil {
		if isUnique(err) {
			return fmt.Errorf("put enrolment %q: %w", e.HostName, relayserver.ErrNameTaken)
		}
		return fmt.Errorf("put enrolment: %w", err)
	}
	return nil
}

// isUnique reports a UNIQUE or PRIMARY KEY constraint failure, by the driver's extended code.
func isUnique(err error) bool {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return false
	}
	return se.Code() == sqlite3.SQLITE_CONSTRAINT_UNIQUE || se.Code() == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY
}

func (t *tx) LiveEnrolments() (int64, error) {
	var n int64
	err := t.q.QueryRowContext(bg, "SELECT COUNT(*) FROM enrolments WHERE revoked_at IS NULL").Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count enrolments: %w", err)
	}
	return n, nil
}

func (t *tx) PutEncAd(ad relayserver.EncAd) error {
	_, err := t.q.ExecContext(bg, `
INSERT INTO enc_ads(host_pubkey, enc_pub, sig, at, ad, ad_sig) VALUES(?, ?, ?, ?, ?, ?)
ON CONFLICT(host_pubkey) DO UPDATE SET enc_pub = excluded.enc_pub, sig = excluded.sig,
	at = excluded.at, ad = excluded.ad, ad_sig = excluded.ad_sig`,
		ad.HostPubkey, ad.EncPub, ad.V1Sig, storekit.MS(ad.At), ad.Ad, ad.AdSig)
	if err != nil {
		return fmt.Errorf("put enc ad: %w", err)
	}
	return nil
}

func (t *tx) EncAd(pubkey string) (relayserver.EncAd, error) { return getEncAd(bg, t.q, pubkey) }

func getEncAd(ctx context.Context, q querier, pubkey string) (relayserver.EncAd, error) {
	return storekit.ScanEncAd(q.QueryRowContext(ctx, "SELECT enc_pub, sig, at, ad, ad_sig FROM enc_ads WHERE host_pubkey = ?",
		pubkey), sql.ErrNoRows, pubkey)
}

func getSenderList(ctx context.Context, q querier, target string) (relayserver.SenderList, error) {
	return storekit.ScanSenderList(q.QueryRowContext(ctx,
		"SELECT senders, iat, record, sig FROM sender_lists WHERE target_pubkey = ?", target), sql.ErrNoRows, target)
}

func (t *tx) SenderList(target string) (relayserver.SenderList, error) {
	return getSenderList(bg, t.q, target)
}

func (t *tx) PutSenderList(l relayserver.SenderList) error {
	senders, js, err := storekit.Senders(l)
	if err != nil {
		return err
	}
	if _, err := t.q.ExecContext(bg, `
INSERT INTO sender_lists(target_pubkey, senders, iat, record, sig) VALUES(?, ?, ?, ?, ?)
ON CONFLICT(target_pubkey) DO UPDATE SET senders = excluded.senders, iat = excluded.iat,
	record = excluded.record, sig = excluded.sig`,
		l.TargetPubkey, js, storekit.MS(l.IAT), l.Record, l.Sig); err != nil {
		return fmt.Errorf("put sender list: %w", err)
	}
	if _, err := t.q.ExecContext(bg,
		"DELETE FROM sender_list_members WHERE target_pubkey = ?", l.TargetPubkey); err != nil {
		return fmt.Errorf("put sender list: %w", err)
	}
	for _, s := range senders {
		if _, err := t.q.ExecContext(bg,
			"INSERT OR IGNORE INTO sender_list_members(target_pubkey, sender_pubkey) VALUES(?, ?)",
			l.TargetPubkey, s); err != nil {
			return fmt.Errorf("put sender list: %w", err)
		}
	}
	return nil
}

func (t *tx) SenderAllowed(target, sender string) (bool, error) {
	var n int
	err := t.q.QueryRowContext(bg, `
SELECT CASE WHEN NOT EXISTS(SELECT 1 FROM sender_lists WHERE target_pubkey = ?1) THEN 1
	WHEN EXISTS(SELECT 1 FROM sender_list_members WHERE target_pubkey = ?1 AND sender_pubkey = ?2)
	THEN 1 ELSE 0 END`, target, sender).Scan(&n)
	if err != nil {
		return false, fmt.Errorf("sender allowed: %w", err)
	}
	return n == 1, nil
}

// admissionSQL reads the dedup row and whether the target accepts the sender in one statement;
// the target's enrolment comes from the enrolment cache and the counters from memory
// (counters.go). The dedup key comes in as a one-row subquery: written as "(SELECT 1) LEFT JOIN
// dedup d ON d.sender = ?4 AND ...", SQLite (modernc v1.62) re-prepared the whole statement at its
// first run in every transaction after an insert.
const admissionSQL = `SELECT d.wire_hash, d.seq, d.accepted_at,
	CASE WHEN NOT EXISTS(SELECT 1 FROM sender_lists WHERE target_pubkey = ?3) THEN 1
		WHEN EXISTS(SELECT 1 FROM sender_list_members WHERE target_pubkey = ?3 AND sender_pubkey = ?1)
		THEN 1 ELSE 0 END
FROM (SELECT ?4 AS sender, ?2 AS item_id, ?5 AS target) k
LEFT JOIN dedup d ON d.sender = k.sender AND d.item_id = k.item_id AND d.target = k.target`

// Admission implements relayserver.Tx.
func (t *tx) Admission(sender, itemID, target string) (relayserver.Admission, error) {
	a := relayserver.Admission{Dedup: relayserver.Dedup{Sender: sender, ItemID: itemID, Target: target}}
	sid, err := t.keyID(sender, false)
	if err != nil {
		return a, fmt.Errorf("admission: %w", err)
	}
	tid, err := t.keyID(target, false)
	if err != nil {
		return a, fmt.Errorf("admission: %w", err)
	}
	var (
		hashS   string
		seq, at sql.NullInt64
		allowed int
	)
	err = t.q.QueryRowContext(bg, admissionSQL, sender, itemID, target, sid, tid).Scan(hashCol{&hashS}, &seq, &at, &allowed)
	if err != nil {
		return a, fmt.Errorf("admission: %w", err)
	}
	if seq.Valid {
		a.Duplicate = true
		a.Dedup.WireHash, a.Dedup.Seq, a.Dedup.AcceptedAt = hashS, seq.Int64, storekit.FromMS(at.Int64)
	}
	a.Allowed = allowed == 1
	if a.Target, a.Enrolled, err = t.enrolment(target); err != nil {
		return a, fmt.Errorf("admission: %w", err)
	}
	if a.Usage, err = t.Usage(target, sender); err != nil {
		return a, fmt.Errorf("admission: %w", err)
	}
	d, err := t.usage(usageKey{"", sender})
	if err != nil {
		return a, fmt.Errorf("admission: %w", err)
	}
	a.SenderDedup = d.Items
	if a.Enrolled && a.Target.Account != "" {
		if a.Account, err = t.AccountUsage(a.Target.Account); err != nil {
			return a, fmt.Errorf("admission: %w", err)
		}
	}
	return a, nil
}

// enrolment returns the enrolment of pub and whether there is one. While this transaction has not
// written the enrolments table it sees committed rows only, those the readers' cache holds: it
// takes them from there and puts back what it had to read.
func (t *tx) enrolment(pub string) (relayserver.Enrolment, bool, error) {
	cached := t.ec != nil && !t.q.enrolWrites
	var gen uint64
	if cached {
		e, g, ok := t.ec.get(pub)
		if ok {
			return e, true, nil
		}
		gen = g
	}
	e, err := getEnrolment(bg, t.q, pub)
	if errors.Is(err, relayserver.ErrNotFound) {
		return e, false, nil
	}
	if err != nil {
		return e, false, err
	}
	if cached {
		t.ec.put(pub, e, gen)
	}
	return e, true, nil
}

func (t *tx) Dedup(sender, itemID, target string) (relayserver.Dedup, error) {
	d := relayserver.Dedup{Sender: sender, ItemID: itemID, Target: target}
	sid, err := t.keyID(sender, false)
	if err != nil {
		return d, fmt.Errorf("dedup: %w", err)
	}
	tid, err := t.keyID(target, false)
	if err != nil {
		return d, fmt.Errorf("dedup: %w", err)
	}
	return storekit.ScanDedup(t.q.QueryRowContext(bg, `SELECT wire_hash, seq, accepted_at FROM dedup
WHERE sender = ? AND item_id = ? AND target = ?`, sid, itemID, tid), sql.ErrNoRows, d, scanHash)
}

func (t *tx) Usage(target, sender string) (relayserver.Usage, error) {
	var u relayserver.Usage
	var err error
	if u.Target, err = t.usage(usageKey{target, ""}); err != nil {
		return u, err
	}
	if u.Sender, err = t.usage(usageKey{target, sender}); err != nil {
		return u, err
	}
	return u, nil
}

// accountUsageSQL sums the totals of the account's live hosts: the rows, plus what this
// transaction added and has not written yet (?2: a JSON object of target → [items, bytes]).
const accountUsageSQL = `SELECT COALESCE(SUM(COALESCE(u.items, 0) + COALESCE(p.value->>0, 0)), 0),
	COALESCE(SUM(COALESCE(u.bytes, 0) + COALESCE(p.value->>1, 0)), 0)
FROM enrolments e
LEFT JOIN usage u ON u.target_pubkey = e.host_pubkey AND u.sender_pubkey = ''
LEFT JOIN json_each(?2) p ON p.key = e.host_pubkey
WHERE e.account = ?1 AND e.revoked_at IS NULL`

func (t *tx) AccountUsage(account string) (relayserver.Counts, error) {
	var c relayserver.Counts
	totals := map[string][2]int64{}
	for k, d := range t.p.usage {
		if k.sender == "" && d != (relayserver.Counts{}) {
			totals[k.target] = [2]int64{d.Items, d.Bytes}
		}
	}
	js, err := json.Marshal(totals)
	if err != nil {
		return c, fmt.Errorf("account usage: %w", err)
	}
	if err := t.q.QueryRowContext(bg, accountUsageSQL, account, string(js)).Scan(&c.Items, &c.Bytes); err != nil {
		return c, fmt.Errorf("account usage: %w", err)
	}
	return c, nil
}

const (
	insertDedupSQL = `INSERT INTO dedup(sender, item_id, target, wire_hash, seq, accepted_at)
VALUES(?, ?, ?, ?, ?, ?)`
	insertItemSQL = `INSERT INTO items(target, seq, kind, item_id, sender, wire_hash, bytes, accepted_at,
	expires_at, wire) VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
)

// InsertItem implements relayserver.Tx: the dedup row first (a repeat of (sender, item id, target)
// fails it before anything has changed), then the item; the seq and the usage counters change in
// memory and are written at the end of the transaction.
func (t *tx) InsertItem(it relayserver.Item) (int64, error) {
	tid, err := t.keyID(it.Target, true)
	if err != nil {
		return 0, fmt.Errorf("insert item: %w", err)
	}
	sid, err := t.keyID(it.Sender, true)
	if err != nil {
		return 0, fmt.Errorf("insert item: %w", err)
	}
	at := storekit.MS(it.AcceptedAt)
	next, err := t.nextSeq(it.Target)
	if err != nil {
		return 0, fmt.Errorf("insert item: %w", err)
	}
	seq := max(next, at, 1)
	hash := packHash(it.WireHash)
	_, err = t.q.ExecContext(bg, insertDedupSQL, sid, it.ItemID, tid, hash, seq, at)
	if isUnique(err) {
		return 0, fmt.Errorf("insert item %s: %w", it.ItemID, relayserver.ErrDuplicate)
	}
	if err != nil {
		return 0, fmt.Errorf("insert item: %w", err)
	}
	n := int64(len(it.Wire))
	if _, err := t.q.ExecContext(bg, insertItemSQL, tid, seq, string(it.Kind), it.ItemID, sid, hash, n, at,
		storekit.MS(it.ExpiresAt), it.Wire); err != nil {
		return 0, fmt.Errorf("insert item: %w", err)
	}
	t.setSeq(it.Target, seq+1)
	t.addUsage(it.Target, it.Sender, 1, n)
	t.addDedup(it.Sender, 1)
	t.inserted++
	return seq, nil
}

func getHead(ctx context.Context, q querier, target string) (relayserver.Head, error) {
	var h relayserver.Head
	err := q.QueryRowContext(ctx, `SELECT
	COALESCE((SELECT next_seq - 1 FROM seqs WHERE target_pubkey = ?1), 0),
	COALESCE((SELECT acked_through FROM acked WHERE target_pubkey = ?1), 0)`, target).
		Scan(&h.HeadSeq, &h.AckedThrough)
	if err != nil {
		return h, fmt.Errorf("head: %w", err)
	}
	return h, nil
}

// Head implements relayserver.Tx, with the seq this transaction allocated last.
func (t *tx) Head(target string) (relayserver.Head, error) {
	h, err := getHead(bg, t.q, target)
	if err != nil {
		return h, err
	}
	next, err := t.nextSeq(target)
	if err != nil {
		return h, fmt.Errorf("head: %w", err)
	}
	h.HeadSeq = max(next-1, 0)
	return h, nil
}

func (t *tx) Ack(target string, through int64) (relayserver.AckResult, error) {
	var res relayserver.AckResult
	h, err := t.Head(target)
	if err != nil {
		return res, fmt.Errorf("ack: %w", err)
	}
	if through < 0 || through > h.HeadSeq {
		return res, fmt.Errorf("ack through %d, head %d: %w", through, h.HeadSeq, relayserver.ErrBadAck)
	}
	type share struct {
		sender       string
		items, bytes int64
	}
	tid, err := t.keyID(target, false)
	if err != nil {
		return res, fmt.Errorf("ack: %w", err)
	}
	rows, err := t.q.QueryContext(bg, `SELECT k.pubkey, COUNT(*), SUM(i.bytes) FROM items i
JOIN keys k ON k.id = i.sender WHERE i.target = ? AND i.seq <= ? GROUP BY k.pubkey`, tid, through)
	if err != nil {
		return res, fmt.Errorf("ack: %w", err)
	}
	var shares []share
	for rows.Next() {
		var s share
		if err := rows.Scan(&s.sender, &s.items, &s.bytes); err != nil {
			rows.Close()
			return res, fmt.Errorf("ack: %w", err)
		}
		shares = append(shares, s)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return res, fmt.Errorf("ack: %w", err)
	}
	r, err := t.q.ExecContext(bg, "DELETE FROM items WHERE target = ? AND seq <= ?", tid, through)
	if err != nil {
		return res, fmt.Errorf("ack: delete: %w", err)
	}
	res.Deleted, _ = r.RowsAffected()
	for _, s := range shares {
		t.addUsage(target, s.sender, -s.items, -s.bytes)
	}
	acked := max(h.AckedThrough, through)
	if _, err := t.q.ExecContext(bg, `INSERT INTO acked(target_pubkey, acked_through) VALUES(?, ?)
ON CONFLICT(target_pubkey) DO UPDATE SET acked_through = excluded.acked_through`, target, acked); err != nil {
		return res, fmt.Errorf("ack: %w", err)
	}
	res.HeadSeq, res.AckedThrough = h.HeadSeq, acked
	return res, nil
}

func (t *tx) ExpiredItems(now time.Time, limit int) ([]relayserver.Item, error) {
	rows, err := t.q.QueryContext(bg, `SELECT kt.pubkey, i.seq, i.kind, i.item_id, ks.pubkey,
	i.wire_hash, i.accepted_at, i.expires_at FROM items i
JOIN keys kt ON kt.id = i.target JOIN keys ks ON ks.id = i.sender
WHERE i.expires_at <= ? ORDER BY i.expires_at LIMIT ?`, storekit.MS(now), limit)
	if err != nil {
		return nil, fmt.Errorf("expired items: %w", err)
	}
	defer rows.Close()
	out, err := storekit.ScanItems(rows, scanHash)
	if err != nil {
		return nil, fmt.Errorf("expired items: %w", err)
	}
	return out, nil
}

func (t *tx) DeleteItem(target string, seq int64) (int64, error) {
	tid, err := t.keyID(target, false)
	if err != nil {
		return 0, fmt.Errorf("delete item: %w", err)
	}
	var sender string
	var n int64
	err = t.q.QueryRowContext(bg, `DELETE FROM items WHERE target = ? AND seq = ?
RETURNING (SELECT pubkey FROM keys WHERE id = sender), bytes`, tid, seq).Scan(&sender, &n)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("delete item: %w", err)
	}
	t.addUsage(target, sender, -1, -n)
	return n, nil
}

// pruneSQL deletes the oldest tombstones accepted at or before ?1 (?2 at most; with ?3 > 0 only
// of senders charged at least ?3 dedup rows) and names their senders.
const pruneSQL = `DELETE FROM dedup WHERE (sender, item_id, target) IN (SELECT d.sender, d.item_id, d.target
	FROM dedup d WHERE d.accepted_at <= ?1
		AND (?3 <= 0 OR d.sender IN (SELECT k.id FROM usage u JOIN keys k ON k.pubkey = u.sender_pubkey
			WHERE u.target_pubkey = '' AND u.items >= ?3))
		AND NOT EXISTS(SELECT 1 FROM items i WHERE i.target = d.target AND i.seq = d.seq)
	ORDER BY d.accepted_at LIMIT ?2)
RETURNING (SELECT pubkey FROM keys WHERE id = sender)`

func (t *tx) PruneDedup(acceptedBefore time.Time, minRows int64, limit int) (int64, error) {
	if minRows > 0 {
		// Usually no sender is over its cap: then the pruning query, which walks the old rows by
		// age, is not run at all. The rows may lag this transaction's changes; a sender missed
		// here is pruned by the next sweep.
		var one int
		err := t.q.QueryRowContext(bg, "SELECT 1 FROM usage WHERE target_pubkey = '' AND items >= ? LIMIT 1", minRows).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return 0, nil
		}
		if err != nil {
			return 0, fmt.Errorf("prune dedup: %w", err)
		}
	}
	if minRows > 0 && t.pendingDedup() {
		// The query reads the sender counters from their rows: write what this transaction
		// changed first.
		if err := t.flush(true); err != nil {
			return 0, fmt.Errorf("prune dedup: %w", err)
		}
	}
	rows, err := t.q.QueryContext(bg, pruneSQL, storekit.MS(acceptedBefore), limit, minRows)
	if err != nil {
		return 0, fmt.Errorf("prune dedup: %w", err)
	}
	per := map[string]int64{}
	var n int64
	for rows.Next() {
		var sender string
		if err := rows.Scan(&sender); err != nil {
			rows.Close()
			return 0, fmt.Errorf("prune dedup: %w", err)
		}
		per[sender]++
		n++
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("prune dedup: %w", err)
	}
	for sender, k := range per {
		t.addDedup(sender, -k)
	}
	return n, nil
}
