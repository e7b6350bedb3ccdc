package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/agentmbx/agentmbx/relayserver"
	"github.com/agentmbx/agentmbx/relayserver/internal/storekit"
)

// tx is the relayserver.Tx of a writer: every call runs inside the open group transaction.
type tx struct {
	ctx    context.Context
	q      pgx.Tx
	depth  int
	broken error
	// notify holds the targets to notify when the transaction commits; a unit that rolls back
	// takes its own entries off.
	notify []string
	// wait says whether a lock may be waited for (the group's first unit) or only tried.
	wait bool
	// held maps the advisory locks the transaction holds to the unit depth that took them: a
	// rolled-back savepoint releases the locks taken inside it.
	held map[string]int
}

// errBusy is a unit's error when a queue lock it needs is held by another transaction and the
// unit may not wait: the writer runs it again in its next group.
var errBusy = errors.New("a queue it needs is locked by another transaction")

var errBroken = errors.New("transaction unusable after a failed rollback")

// Unit implements relayserver.Tx with a savepoint. A panic in fn fails the unit alone.
func (t *tx) Unit(fn func(relayserver.Tx) error) (err error) {
	if t.broken != nil {
		return t.broken
	}
	t.depth++
	defer func() { t.depth-- }()
	sp := "u" + strconv.Itoa(t.depth)
	if _, err := t.q.Exec(t.ctx, "SAVEPOINT "+sp); err != nil {
		t.broken = fmt.Errorf("%w: savepoint: %v", errBroken, err)
		return t.broken
	}
	mark := len(t.notify)
	func() {
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("unit panicked: %v", p)
			}
		}()
		err = fn(t)
	}()
	if err != nil {
		t.notify = t.notify[:mark]
		for k, d := range t.held {
			if d >= t.depth {
				delete(t.held, k)
			}
		}
		if _, rerr := t.q.Exec(t.ctx, "ROLLBACK TO SAVEPOINT "+sp); rerr != nil {
			t.broken = fmt.Errorf("%w: %v", errBroken, rerr)
			return err
		}
	}
	if _, rerr := t.q.Exec(t.ctx, "RELEASE SAVEPOINT "+sp); rerr != nil {
		t.broken = fmt.Errorf("%w: %v", errBroken, rerr)
		if err == nil {
			err = rerr
		}
	}
	for k, d := range t.held {
		if d >= t.depth {
			t.held[k] = t.depth - 1 // the parent holds it now
		}
	}
	return err
}

// guarded runs fn in a savepoint of its own, so an expected statement error (a unique violation)
// leaves the caller's unit usable, as the SQLite store's statements do.
func (t *tx) guarded(fn func() error) error {
	if _, err := t.q.Exec(t.ctx, "SAVEPOINT g"); err != nil {
		return err
	}
	if err := fn(); err != nil {
		if _, rerr := t.q.Exec(t.ctx, "ROLLBACK TO SAVEPOINT g"); rerr != nil {
			t.broken = fmt.Errorf("%w: %v", errBroken, rerr)
		}
		return err
	}
	_, err := t.q.Exec(t.ctx, "RELEASE SAVEPOINT g")
	return err
}

func isUnique(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23505"
}

// Transaction-scoped advisory locks of a target's queue (or of an account's quota, or of a
// sender's dedup counter). Every writer of a queue holds its lock, so reads after it are exact for
// the transaction's decisions (dedup, quotas, the head). A push takes its sender's lock before
// counting a dedup row, so two groups never wait on that counter's row lock: the later one's
// unit fails with errBusy and leads a later group. The admission reads the counter without the
// lock: concurrent pushes of one sender may pass its cap by what they hold in flight.
const (
	lockSQL    = "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))"
	tryLockSQL = "SELECT pg_try_advisory_xact_lock(hashtextextended($1, 0))"
)

func queueLock(target string) string    { return "q:" + target }
func senderLock(sender string) string   { return "s:" + sender }
func accountLock(account string) string { return "a:" + account }

// lockThen takes the lock named key (see lock) and runs query; when the lock may be waited for,
// both go in one round trip.
func (t *tx) lockThen(key, query string, args ...any) pgx.Row {
	if _, ok := t.held[key]; ok || !t.wait {
		if err := t.lock(key); err != nil {
			return errRow{err}
		}
		return t.q.QueryRow(t.ctx, query, args...)
	}
	b := &pgx.Batch{}
	b.Queue(lockSQL, key)
	b.Queue(query, args...)
	t.held[key] = t.depth
	return batchRow{t.q.SendBatch(t.ctx, b)}
}

// batchRow is the second statement of a lock-then-read batch.
type batchRow struct{ br pgx.BatchResults }

func (r batchRow) Scan(dest ...any) error {
	defer r.br.Close()
	if _, err := r.br.Exec(); err != nil {
		return err
	}
	return r.br.QueryRow().Scan(dest...)
}

// errRow is a row whose query never ran.
type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// lock takes the named locks not yet held: waiting for them in the group's first unit, else only
// trying, failing with errBusy when another transaction holds one.
func (t *tx) lock(keys ...string) error {
	for _, k := range keys {
		if _, ok := t.held[k]; ok {
			continue
		}
		if t.wait {
			if _, err := t.q.Exec(t.ctx, lockSQL, k); err != nil {
				return err
			}
		} else {
			var ok bool
			if err := t.q.QueryRow(t.ctx, tryLockSQL, k).Scan(&ok); err != nil {
				return err
			}
			if !ok {
				return errBusy
			}
		}
		t.held[k] = t.depth
	}
	return nil
}

func getEnrolment(ctx context.Context, q querier, pubkey string) (relayserver.Enrolment, error) {
	e, err := storekit.ScanEnrolment(q.QueryRow(ctx, "SELECT "+storekit.EnrolmentCols+" FROM enrolments WHERE host_pubkey = $1", pubkey),
		pgx.ErrNoRows)
	if err != nil && !errors.Is(err, relayserver.ErrNotFound) {
		return e, fmt.Errorf("enrolment: %w", err)
	}
	return e, err
}

func (t *tx) Enrolment(pubkey string) (relayserver.Enrolment, error) {
	return getEnrolment(t.ctx, t.q, pubkey)
}

func (t *tx) PutEnrolment(e relayserver.Enrolment) error {
	err := t.guarded(func() error {
		_, err := t.q.Exec(t.ctx, `
INSERT INTO enrolments(host_pubkey, host_name, owner_fp, account, org, authorized_by, authority_rank,
	enrolled_at, revoked_at, client_id, denied_at, auth_until)
VALUES($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
ON CONFLICT(host_pubkey) DO UPDATE SET host_name = excluded.host_name, owner_fp = excluded.owner_fp,
	account = excluded.account, org = excluded.org, authorized_by = excluded.authorized_by,
	authority_rank = excluded.authority_rank, enrolled_at = excluded.enrolled_at,
	revoked_at = COALESCE(enrolments.revoked_at, excluded.revoked_at),
	client_id = excluded.client_id, denied_at = excluded.denied_at, auth_until = excluded.auth_until`,
			e.HostPubkey, e.HostName, e.OwnerFP, storekit.NullStr(e.Account), e.Org, e.AuthorizedBy,
			e.AuthorityRank, storekit.MS(e.EnrolledAt), storekit.NullMS(e.RevokedAt), e.ClientID, storekit.NullMS(e.DeniedAt),
			storekit.NullMS(e.AuthUntil))
		return err
	})
	if isUnique(err) {
		return fmt.Errorf("put enrolment %q: %w", e.HostName, relayserver.ErrNameTaken)
	}
	if err != nil {
		return fmt.Errorf("put enrolment: %w", err)
	}
	return nil
}

func (t *tx) LiveEnrolments() (int64, error) {
	var n int64
	if err := t.q.QueryRow(t.ctx, "SELECT count(*) FROM enrolments WHERE revoked_at IS NULL").Scan(&n); err != nil {
		return 0, fmt.Errorf("count enrolments: %w", err)
	}
	return n, nil
}

func (t *tx) PutEncAd(ad relayserver.EncAd) error {
	_, err := t.q.Exec(t.ctx, `
INSERT INTO enc_ads(host_pubkey, enc_pub, sig, at, ad, ad_sig) VALUES($1, $2, $3, $4, $5, $6)
ON CONFLICT(host_pubkey) DO UPDATE SET enc_pub = excluded.enc_pub, sig = excluded.sig,
	at = excluded.at, ad = excluded.ad, ad_sig = excluded.ad_sig`,
		ad.HostPubkey, ad.EncPub, ad.V1Sig, storekit.MS(ad.At), ad.Ad, ad.AdSig)
	if err != nil {
		return fmt.Errorf("put enc ad: %w", err)
	}
	return nil
}

func (t *tx) EncAd(pubkey string) (relayserver.EncAd, error) { return getEncAd(t.ctx, t.q, pubkey) }

func getEncAd(ctx context.Context, q querier, pubkey string) (relayserver.EncAd, error) {
	return storekit.ScanEncAd(q.QueryRow(ctx, "SELECT enc_pub, sig, at, ad, ad_sig FROM enc_ads WHERE host_pubkey = $1",
		pubkey), pgx.ErrNoRows, pubkey)
}

func getSenderList(ctx context.Context, q querier, target string) (relayserver.SenderList, error) {
	return storekit.ScanSenderList(q.QueryRow(ctx,
		"SELECT senders, iat, record, sig FROM sender_lists WHERE target_pubkey = $1", target), pgx.ErrNoRows, target)
}

func (t *tx) SenderList(target string) (relayserver.SenderList, error) {
	return getSenderList(t.ctx, t.q, target)
}

func (t *tx) PutSenderList(l relayserver.SenderList) error {
	senders, js, err := storekit.Senders(l)
	if err != nil {
		return err
	}
	record := l.Record
	if record == nil {
		record = []byte{}
	}
	b := &pgx.Batch{}
	b.Queue(`INSERT INTO sender_lists(target_pubkey, senders, iat, record, sig) VALUES($1, $2, $3, $4, $5)
ON CONFLICT(target_pubkey) DO UPDATE SET senders = excluded.senders, iat = excluded.iat,
	record = excluded.record, sig = excluded.sig`, l.TargetPubkey, js, storekit.MS(l.IAT), record, l.Sig)
	b.Queue("DELETE FROM sender_list_members WHERE target_pubkey = $1", l.TargetPubkey)
	b.Queue(`INSERT INTO sender_list_members(target_pubkey, sender_pubkey)
SELECT $1, s FROM unnest($2::text[]) AS s ON CONFLICT DO NOTHING`, l.TargetPubkey, senders)
	if err := t.q.SendBatch(t.ctx, b).Close(); err != nil {
		return fmt.Errorf("put sender list: %w", err)
	}
	return nil
}

const allowedSQL = `(NOT EXISTS(SELECT 1 FROM sender_lists WHERE target_pubkey = $1)
	OR EXISTS(SELECT 1 FROM sender_list_members WHERE target_pubkey = $1 AND sender_pubkey = $2))`

func (t *tx) SenderAllowed(target, sender string) (bool, error) {
	var ok bool
	if err := t.q.QueryRow(t.ctx, "SELECT "+allowedSQL, target, sender).Scan(&ok); err != nil {
		return false, fmt.Errorf("sender allowed: %w", err)
	}
	return ok, nil
}

// Admission implements relayserver.Tx. It first takes the target's queue lock (and, for a target
// of a proven account, the account's), so what it reads stays true until the unit's transaction
// ends: a dedup row, a quota, an allowlist cannot change under the decision on another replica.
func (t *tx) Admission(sender, itemID, target string) (relayserver.Admission, error) {
	a := relayserver.Admission{Dedup: relayserver.Dedup{Sender: sender, ItemID: itemID, Target: target}}
	var (
		hash, pub, name, owner, account, org, authBy *string
		seq, at, enrolled, revoked                   *int64
		rank                                         *int
	)
	err := t.lockThen(queueLock(target), `SELECT d.wire_hash, d.seq, d.accepted_at,
	e.host_pubkey, e.host_name, e.owner_fp, e.account, e.org, e.authorized_by, e.authority_rank,
	e.enrolled_at, e.revoked_at, `+allowedSQL+`,
	COALESCE(ut.items, 0), COALESCE(ut.bytes, 0), COALESCE(us.items, 0), COALESCE(us.bytes, 0),
	COALESCE(ud.items, 0)
FROM (SELECT 1) one
LEFT JOIN dedup d ON d.sender_pubkey = $2 AND d.item_id = $3 AND d.target_pubkey = $1
LEFT JOIN enrolments e ON e.host_pubkey = $1
LEFT JOIN usage ut ON ut.target_pubkey = $1 AND ut.sender_pubkey = ''
LEFT JOIN usage us ON us.target_pubkey = $1 AND us.sender_pubkey = $2
LEFT JOIN usage ud ON ud.target_pubkey = '' AND ud.sender_pubkey = $2`, target, sender, itemID).Scan(
		&hash, &seq, &at, &pub, &name, &owner, &account, &org, &authBy, &rank, &enrolled, &revoked,
		&a.Allowed, &a.Usage.Target.Items, &a.Usage.Target.Bytes, &a.Usage.Sender.Items, &a.Usage.Sender.Bytes,
		&a.SenderDedup)
	if err != nil {
		return a, fmt.Errorf("admission: %w", err)
	}
	if hash != nil {
		a.Duplicate = true
		a.Dedup.WireHash, a.Dedup.Seq, a.Dedup.AcceptedAt = *hash, *seq, storekit.FromMS(*at)
	}
	if pub == nil {
		return a, nil
	}
	a.Enrolled = true
	a.Target = relayserver.Enrolment{HostPubkey: *pub, HostName: *name, OwnerFP: *owner, Org: *org,
		AuthorizedBy: *authBy, AuthorityRank: *rank, EnrolledAt: storekit.FromMS(*enrolled), RevokedAt: storekit.FromNullMS(revoked)}
	if account != nil {
		a.Target.Account = *account
		err := t.lockThen(accountLock(*account), accountUsageSQL, *account).Scan(&a.Account.Items, &a.Account.Bytes)
		if err != nil {
			return a, fmt.Errorf("admission: account: %w", err)
		}
	}
	return a, nil
}

func (t *tx) Dedup(sender, itemID, target string) (relayserver.Dedup, error) {
	d := relayserver.Dedup{Sender: sender, ItemID: itemID, Target: target}
	return storekit.ScanDedup(t.q.QueryRow(t.ctx, `SELECT wire_hash, seq, accepted_at FROM dedup
WHERE sender_pubkey = $1 AND item_id = $2 AND target_pubkey = $3`, sender, itemID, target),
		pgx.ErrNoRows, d, func(p *string) any { return p })
}

func (t *tx) Usage(target, sender string) (relayserver.Usage, error) {
	var u relayserver.Usage
	err := t.q.QueryRow(t.ctx, `SELECT
	COALESCE(sum(items) FILTER (WHERE sender_pubkey = ''), 0)::bigint,
	COALESCE(sum(bytes) FILTER (WHERE sender_pubkey = ''), 0)::bigint,
	COALESCE(sum(items) FILTER (WHERE sender_pubkey = $2), 0)::bigint,
	COALESCE(sum(bytes) FILTER (WHERE sender_pubkey = $2), 0)::bigint
FROM usage WHERE target_pubkey = $1 AND sender_pubkey IN ('', $2)`, target, sender).
		Scan(&u.Target.Items, &u.Target.Bytes, &u.Sender.Items, &u.Sender.Bytes)
	if err != nil {
		return u, fmt.Errorf("usage: %w", err)
	}
	return u, nil
}

const accountUsageSQL = `SELECT COALESCE(sum(u.items), 0)::bigint, COALESCE(sum(u.bytes), 0)::bigint
FROM enrolments e JOIN usage u ON u.target_pubkey = e.host_pubkey AND u.sender_pubkey = ''
WHERE e.account = $1 AND e.revoked_at IS NULL`

func (t *tx) AccountUsage(account string) (relayserver.Counts, error) {
	var c relayserver.Counts
	if err := t.q.QueryRow(t.ctx, accountUsageSQL, account).Scan(&c.Items, &c.Bytes); err != nil {
		return c, fmt.Errorf("account usage: %w", err)
	}
	return c, nil
}

// insertSQL stores one item in one statement, under the target's queue lock: the seq is
// max(next_seq, accepted_at, 1) read from the target's counter row locked FOR UPDATE; the dedup
// row goes in first, and when it exists already nothing else changes (no row comes back).
const insertSQL = `WITH cur AS (
	SELECT GREATEST(COALESCE((SELECT next_seq FROM seqs WHERE target_pubkey = $3 FOR UPDATE), 0), $5::bigint, 1) AS seq
), d AS (
	INSERT INTO dedup(sender_pubkey, item_id, target_pubkey, wire_hash, seq, accepted_at)
	SELECT $1, $2, $3, $4, cur.seq, $5 FROM cur
	ON CONFLICT DO NOTHING RETURNING seq
), s AS (
	INSERT INTO seqs(target_pubkey, next_seq) SELECT $3, seq + 1 FROM d
	ON CONFLICT(target_pubkey) DO UPDATE SET next_seq = excluded.next_seq
), i AS (
	INSERT INTO items(target_pubkey, seq, kind, item_id, sender_pubkey, wire_hash, bytes,
		accepted_at, expires_at, wire)
	SELECT $3, seq, $6, $2, $1, $4, $7, $5, $8, $9 FROM d
), u AS (
	INSERT INTO usage(target_pubkey, sender_pubkey, items, bytes)
	SELECT $3, k, 1, $7 FROM d, unnest(ARRAY['', $1]) AS k
	ON CONFLICT(target_pubkey, sender_pubkey) DO UPDATE SET items = usage.items + 1,
		bytes = usage.bytes + excluded.bytes
), c AS (
	INSERT INTO usage(target_pubkey, sender_pubkey, items, bytes) SELECT '', $1, 1, 0 FROM d
	ON CONFLICT(target_pubkey, sender_pubkey) DO UPDATE SET items = usage.items + 1
)
SELECT seq FROM d`

// InsertItem implements relayserver.Tx: one round trip (the queue lock and insertSQL), after the
// sender's lock (senderLock) the first time the transaction inserts for the sender.
func (t *tx) InsertItem(it relayserver.Item) (int64, error) {
	if err := t.lock(senderLock(it.Sender)); err != nil {
		return 0, fmt.Errorf("insert item: %w", err)
	}
	var seq int64
	wire := it.Wire
	if wire == nil {
		wire = []byte{}
	}
	err := t.lockThen(queueLock(it.Target), insertSQL, it.Sender, it.ItemID, it.Target, it.WireHash,
		storekit.MS(it.AcceptedAt), string(it.Kind), int64(len(it.Wire)), storekit.MS(it.ExpiresAt), wire).Scan(&seq)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, fmt.Errorf("insert item %s: %w", it.ItemID, relayserver.ErrDuplicate)
	}
	if err != nil {
		return 0, fmt.Errorf("insert item: %w", err)
	}
	t.notify = append(t.notify, it.Target)
	return seq, nil
}

const headSQL = `SELECT
	COALESCE((SELECT next_seq - 1 FROM seqs WHERE target_pubkey = $1), 0),
	COALESCE((SELECT acked_through FROM acked WHERE target_pubkey = $1), 0)`

func getHead(ctx context.Context, q querier, target string) (relayserver.Head, error) {
	var h relayserver.Head
	if err := q.QueryRow(ctx, headSQL, target).Scan(&h.HeadSeq, &h.AckedThrough); err != nil {
		return h, fmt.Errorf("head: %w", err)
	}
	return h, nil
}

func (t *tx) Head(target string) (relayserver.Head, error) { return getHead(t.ctx, t.q, target) }

// takeUsageSQL subtracts deleted items from the counters ($2: senders, $3: counts, $4: bytes;
// the target's total under ”); dropZeroSQL then drops the counters that reached zero.
const (
	takeUsageSQL = `UPDATE usage SET items = usage.items - x.n, bytes = usage.bytes - x.b
FROM unnest($2::text[], $3::bigint[], $4::bigint[]) AS x(sender_pubkey, n, b)
WHERE usage.target_pubkey = $1 AND usage.sender_pubkey = x.sender_pubkey`
	dropZeroSQL = `DELETE FROM usage WHERE target_pubkey = $1 AND items <= 0`
)

func (t *tx) Ack(target string, through int64) (relayserver.AckResult, error) {
	var res relayserver.AckResult
	var h relayserver.Head
	if err := t.lockThen(queueLock(target), headSQL, target).Scan(&h.HeadSeq, &h.AckedThrough); err != nil {
		return res, fmt.Errorf("ack: head: %w", err)
	}
	if through < 0 || through > h.HeadSeq {
		return res, fmt.Errorf("ack through %d, head %d: %w", through, h.HeadSeq, relayserver.ErrBadAck)
	}
	rows, err := t.q.Query(t.ctx, `DELETE FROM items WHERE target_pubkey = $1 AND seq <= $2
RETURNING sender_pubkey, bytes`, target, through)
	if err != nil {
		return res, fmt.Errorf("ack: delete: %w", err)
	}
	var ds deleted
	for rows.Next() {
		var sender string
		var n int64
		if err := rows.Scan(&sender, &n); err != nil {
			rows.Close()
			return res, fmt.Errorf("ack: delete: %w", err)
		}
		ds.add(sender, n)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return res, fmt.Errorf("ack: delete: %w", err)
	}
	acked := max(h.AckedThrough, through)
	b := &pgx.Batch{}
	if ds.items > 0 {
		ds.queue(b, target)
	}
	b.Queue(`INSERT INTO acked(target_pubkey, acked_through) VALUES($1, $2)
ON CONFLICT(target_pubkey) DO UPDATE SET acked_through = excluded.acked_through`, target, acked)
	if err := t.q.SendBatch(t.ctx, b).Close(); err != nil {
		return res, fmt.Errorf("ack: %w", err)
	}
	res.Deleted, res.HeadSeq, res.AckedThrough = ds.items, h.HeadSeq, acked
	return res, nil
}

// deleted sums deleted items per sender, for takeUsageSQL.
type deleted struct {
	items, bytes int64
	idx          map[string]int
	senders      []string
	n, b         []int64
}

func (d *deleted) add(sender string, bytes int64) {
	if d.idx == nil {
		d.idx = map[string]int{}
	}
	i, ok := d.idx[sender]
	if !ok {
		i = len(d.senders)
		d.idx[sender] = i
		d.senders, d.n, d.b = append(d.senders, sender), append(d.n, 0), append(d.b, 0)
	}
	d.n[i]++
	d.b[i] += bytes
	d.items++
	d.bytes += bytes
}

func (d *deleted) queue(b *pgx.Batch, target string) {
	b.Queue(takeUsageSQL, target, append(d.senders, ""), append(d.n, d.items), append(d.b, d.bytes))
	b.Queue(dropZeroSQL, target)
}

func (t *tx) ExpiredItems(now time.Time, limit int) ([]relayserver.Item, error) {
	rows, err := t.q.Query(t.ctx, `SELECT target_pubkey, seq, kind, item_id, sender_pubkey,
	wire_hash, accepted_at, expires_at FROM items WHERE expires_at <= $1 ORDER BY expires_at LIMIT $2`,
		storekit.MS(now), limit)
	if err != nil {
		return nil, fmt.Errorf("expired items: %w", err)
	}
	defer rows.Close()
	out, err := storekit.ScanItems(rows, func(p *string) any { return p })
	if err != nil {
		return nil, fmt.Errorf("expired items: %w", err)
	}
	return out, nil
}

func (t *tx) DeleteItem(target string, seq int64) (int64, error) {
	var sender string
	var n int64
	err := t.lockThen(queueLock(target), `DELETE FROM items WHERE target_pubkey = $1 AND seq = $2
RETURNING sender_pubkey, bytes`, target, seq).Scan(&sender, &n)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("delete item: %w", err)
	}
	var ds deleted
	ds.add(sender, n)
	b := &pgx.Batch{}
	ds.queue(b, target)
	if err := t.q.SendBatch(t.ctx, b).Close(); err != nil {
		return 0, fmt.Errorf("delete item: usage: %w", err)
	}
	return n, nil
}

// pruneSQL deletes the oldest tombstones accepted at or before $1 ($2 at most; with $3 > 0 only of
// senders charged at least $3 dedup rows) and takes them off their senders' counters.
const pruneSQL = `WITH del AS (
	DELETE FROM dedup WHERE (sender_pubkey, item_id, target_pubkey) IN (
		SELECT d.sender_pubkey, d.item_id, d.target_pubkey FROM dedup d
		WHERE d.accepted_at <= $1
			AND ($3 <= 0 OR d.sender_pubkey IN (SELECT sender_pubkey FROM usage WHERE target_pubkey = '' AND items >= $3))
			AND NOT EXISTS(SELECT 1 FROM items i WHERE i.target_pubkey = d.target_pubkey AND i.seq = d.seq)
		ORDER BY d.accepted_at LIMIT $2)
	RETURNING sender_pubkey
), cnt AS (
	SELECT sender_pubkey, count(*) AS n FROM del GROUP BY sender_pubkey
), up AS (
	UPDATE usage u SET items = u.items - cnt.n FROM cnt WHERE u.target_pubkey = '' AND u.sender_pubkey = cnt.sender_pubkey
)
SELECT COALESCE(sum(n), 0)::bigint FROM cnt`

func (t *tx) PruneDedup(acceptedBefore time.Time, minRows int64, limit int) (int64, error) {
	var n int64
	if minRows > 0 {
		// Usually no sender is over its cap: then the pruning query, which walks the old rows
		// by age, is not run at all.
		var over bool
		if err := t.q.QueryRow(t.ctx, "SELECT EXISTS(SELECT 1 FROM usage WHERE target_pubkey = '' AND items >= $1)", minRows).Scan(&over); err != nil {
			return 0, fmt.Errorf("prune dedup: %w", err)
		}
		if !over {
			return 0, nil
		}
	}
	if err := t.q.QueryRow(t.ctx, pruneSQL, storekit.MS(acceptedBefore), limit, minRows).Scan(&n); err != nil {
		return 0, fmt.Errorf("prune dedup: %w", err)
	}
	if n > 0 {
		if _, err := t.q.Exec(t.ctx, "DELETE FROM usage WHERE target_pubkey = '' AND items <= 0"); err != nil {
			return 0, fmt.Errorf("prune dedup: %w", err)
		}
	}
	return n, nil
}
