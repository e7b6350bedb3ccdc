package storekit

import (
	"encoding/json"
	"fmt"

	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/relayserver"
)

// DenyCols are the columns ScanDenyEntries reads, in order.
const DenyCols = "kind, value, added_at, until, note, reclaim_at, reclaimed_at, reclaimed"

// ScanDenyEntries reads rows of DenyCols.
func ScanDenyEntries(rows Rows) ([]relayserver.DenyEntry, error) {
	var out []relayserver.DenyEntry
	for rows.Next() {
		var d relayserver.DenyEntry
		var added, until, reclaim, reclaimed int64
		var res string
		if err := rows.Scan(&d.Kind, &d.Value, &added, &until, &d.Note, &reclaim, &reclaimed, &res); err != nil {
			return nil, err
		}
		d.AddedAt, d.Until = FromMS(added), FromMS(until)
		d.ReclaimAt, d.ReclaimedAt = FromMS(reclaim), FromMS(reclaimed)
		if res != "" {
			if err := json.Unmarshal([]byte(res), &d.Reclaimed); err != nil {
				return nil, fmt.Errorf("deny entry %s %s: reclaimed: %w", d.Kind, d.Value, err)
			}
		}
		out = append(out, d)
	}
	return out, rows.Err()
}

// ReclaimJSON is the text a store keeps of a reclaim's result.
func ReclaimJSON(r relayserver.ReclaimResult) string {
	b, _ := json.Marshal(r) // three integers: cannot fail
	return string(b)
}

// DeniedCandidates is the query of the enrolments the deny list revoked that an entry may match
// (one placeholder, the client_id, for a client entry; none for a fingerprint entry).
func DeniedCandidates(d relayserver.DenyEntry, placeholder string) (query string, args []any, ok bool) {
	const q = "SELECT host_pubkey FROM enrolments WHERE denied_at IS NOT NULL"
	switch d.Kind {
	case relayserver.DenyClient:
		return q + " AND client_id = " + placeholder, []any{d.Value}, true
	case relayserver.DenyHost:
		return q, nil, true
	}
	return "", nil, false
}

// DenyCandidates is the query of the live, not yet denied enrolments an entry may match (one
// placeholder, the client_id, for a client entry; none for a fingerprint entry, which reads all:
// a fingerprint is a hash of the key). ok is false for an unknown kind.
func DenyCandidates(d relayserver.DenyEntry, placeholder string) (query string, args []any, ok bool) {
	const q = "SELECT host_pubkey FROM enrolments WHERE revoked_at IS NULL AND denied_at IS NULL"
	switch d.Kind {
	case relayserver.DenyClient:
		return q + " AND client_id = " + placeholder, []any{d.Value}, true
	case relayserver.DenyHost:
		return q, nil, true
	}
	return "", nil, false
}

// DeniedKeys reads the host keys of DenyCandidates' rows that d matches.
func DeniedKeys(rows Rows, d relayserver.DenyEntry) ([]string, error) {
	var keys []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			return nil, err
		}
		if d.Kind == relayserver.DenyClient || mbx.Fingerprint(k) == d.Value {
			keys = append(keys, k)
		}
	}
	return keys, rows.Err()
}

// UsageSQL reads, per key, what its queue holds, what it sent that is queued, and its dedup rows,
// from the usage counters, ordered by the disk charged to it (ORDER BY charged, ?1 = DedupRowBytes
// and ?2 = the number of keys, in the store's placeholder spelling, replace P1 and P2).
const UsageSQL = `WITH per(k, qi, qb, si, sb, dr) AS (
	SELECT target_pubkey, items, bytes, 0, 0, 0 FROM usage WHERE sender_pubkey = '' AND target_pubkey <> ''
	UNION ALL SELECT sender_pubkey, 0, 0, items, bytes, 0 FROM usage WHERE target_pubkey <> '' AND sender_pubkey <> ''
	UNION ALL SELECT sender_pubkey, 0, 0, 0, 0, items FROM usage WHERE target_pubkey = ''
), agg AS (SELECT k, SUM(qi) AS qi, SUM(qb) AS qb, SUM(si) AS si, SUM(sb) AS sb, SUM(dr) AS dr FROM per GROUP BY k)
SELECT k, qi, qb, si, sb, dr FROM agg ORDER BY qb + dr * P1 DESC, k LIMIT P2`

// UsageTotalsSQL reads the queued items and bytes and the dedup rows of all keys.
const UsageTotalsSQL = `SELECT COALESCE(SUM(CASE WHEN sender_pubkey = '' THEN items ELSE 0 END), 0),
	COALESCE(SUM(CASE WHEN sender_pubkey = '' THEN bytes ELSE 0 END), 0),
	COALESCE(SUM(CASE WHEN target_pubkey = '' THEN items ELSE 0 END), 0)
FROM usage WHERE sender_pubkey = '' OR target_pubkey = ''`

// ScanKeyUsage reads rows of UsageSQL.
func ScanKeyUsage(rows Rows) ([]relayserver.KeyUsage, error) {
	var out []relayserver.KeyUsage
	for rows.Next() {
		var u relayserver.KeyUsage
		if err := rows.Scan(&u.Pubkey, &u.Queue.Items, &u.Queue.Bytes, &u.Sent.Items, &u.Sent.Bytes, &u.DedupRows); err != nil {
			return nil, err
		}
		out = append(out, u)
	}
	return out, rows.Err()
}
