package storekit

import (
	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/relayserver"
)

// DenyCols are the columns ScanDenyEntries reads, in order.
const DenyCols = "kind, value, added_at, until, note"

// ScanDenyEntries reads rows of DenyCols.
func ScanDenyEntries(rows Rows) ([]relayserver.DenyEntry, error) {
	var out []relayserver.DenyEntry
	for rows.Next() {
		var d relayserver.DenyEntry
		var added, until int64
		if err := rows.Scan(&d.Kind, &d.Value, &added, &until, &d.Note); err != nil {
			return nil, err
		}
		d.AddedAt, d.Until = FromMS(added), FromMS(until)
		out = append(out, d)
	}
	return out, rows.Err()
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
