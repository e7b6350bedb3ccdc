package storekit

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/agentmbx/agentmbx/relayserver"
)

// MS is t in Unix milliseconds, 0 for the zero time.
func MS(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// FromMS is the inverse of MS (UTC).
func FromMS(v int64) time.Time {
	if v == 0 {
		return time.Time{}
	}
	return time.UnixMilli(v).UTC()
}

// FromNullMS is FromMS of a nullable column.
func FromNullMS(v *int64) time.Time {
	if v == nil {
		return time.Time{}
	}
	return FromMS(*v)
}

// NullStr stores "" as NULL.
func NullStr(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// NullMS stores the zero time as NULL.
func NullMS(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UnixMilli()
}

// Row is a single-row result (*sql.Row, pgx.Row).
type Row interface{ Scan(dest ...any) error }

// Rows is a result set (*sql.Rows, pgx.Rows); the caller closes it.
type Rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}

// EnrolmentCols are the columns ScanEnrolment reads, in order.
const EnrolmentCols = `host_pubkey, host_name, owner_fp, COALESCE(account, ''), org, authorized_by,
	authority_rank, enrolled_at, COALESCE(revoked_at, 0), client_id, COALESCE(denied_at, 0),
	COALESCE(auth_until, 0)`

// ScanEnrolment reads a row of EnrolmentCols; the driver's noRows error (when not nil) becomes
// relayserver.ErrNotFound.
func ScanEnrolment(r Row, noRows error) (relayserver.Enrolment, error) {
	var e relayserver.Enrolment
	var enrolled, revoked, denied, authUntil int64
	err := r.Scan(&e.HostPubkey, &e.HostName, &e.OwnerFP, &e.Account, &e.Org, &e.AuthorizedBy,
		&e.AuthorityRank, &enrolled, &revoked, &e.ClientID, &denied, &authUntil)
	if noRows != nil && errors.Is(err, noRows) {
		return e, relayserver.ErrNotFound
	}
	e.EnrolledAt, e.RevokedAt, e.DeniedAt, e.AuthUntil = FromMS(enrolled), FromMS(revoked), FromMS(denied), FromMS(authUntil)
	return e, err
}

// ScanMeta reads the (key, value) rows of the meta table. Unknown keys are skipped.
func ScanMeta(rows Rows) (relayserver.Meta, error) {
	var m relayserver.Meta
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			return m, err
		}
		switch k {
		case "epoch":
			m.Epoch = v
		case "relay_pubkey":
			m.RelayPubkey = v
		case "schema_version":
			m.SchemaVersion, _ = strconv.Atoi(v)
		case "heartbeat":
			if ms, err := strconv.ParseInt(v, 10, 64); err == nil {
				m.Heartbeat = time.UnixMilli(ms).UTC()
			}
		case "restored_at":
			if ms, err := strconv.ParseInt(v, 10, 64); err == nil {
				m.RestoredAt = time.UnixMilli(ms).UTC()
			}
		case "restored_from":
			m.RestoredFrom = v
		}
	}
	return m, rows.Err()
}

// SchemaVersion parses the stored schema_version (v and err from reading it).
func SchemaVersion(v string, err error) (int, error) {
	if errors.Is(err, relayserver.ErrNotFound) {
		return 0, errors.New("meta table without schema_version")
	}
	if err != nil {
		return 0, err
	}
	ver, err := strconv.Atoi(v)
	if err != nil || ver < 1 {
		return 0, fmt.Errorf("bad schema_version %q", v)
	}
	return ver, nil
}

// ScanDepths reads (target, items, bytes) rows.
func ScanDepths(rows Rows) ([]relayserver.TargetDepth, error) {
	var out []relayserver.TargetDepth
	for rows.Next() {
		var d relayserver.TargetDepth
		if err := rows.Scan(&d.Target, &d.Items, &d.Bytes); err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, rows.Err()
}

// KeyMismatch is the error of a store bound to relay key have when the relay runs with want.
// Public keys are not secret; their prefixes help the operator find the right key.
func KeyMismatch(what, have, want string) error {
	return fmt.Errorf("the %s belongs to relay key %s, not %s: %w",
		what, ShortKey(have), ShortKey(want), relayserver.ErrRelayKeyMismatch)
}

// ShortKey abbreviates a public key for messages.
func ShortKey(pub string) string {
	if len(pub) > 12 {
		return pub[:12] + "…"
	}
	return pub
}

// ScanEnrolments reads rows of EnrolmentCols.
func ScanEnrolments(rows Rows) ([]relayserver.Enrolment, error) {
	var out []relayserver.Enrolment
	for rows.Next() {
		e, err := ScanEnrolment(rows, nil)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

// ScanEncAd reads a row of (enc_pub, sig, at, ad, ad_sig) for pubkey; the driver's noRows error
// becomes relayserver.ErrNotFound.
func ScanEncAd(r Row, noRows error, pubkey string) (relayserver.EncAd, error) {
	ad := relayserver.EncAd{HostPubkey: pubkey}
	var at int64
	err := r.Scan(&ad.EncPub, &ad.V1Sig, &at, &ad.Ad, &ad.AdSig)
	if errors.Is(err, noRows) {
		return ad, relayserver.ErrNotFound
	}
	if err != nil {
		return ad, fmt.Errorf("enc ad: %w", err)
	}
	ad.At = FromMS(at)
	return ad, nil
}

// ScanSenderList reads a row of (senders, iat, record, sig) for target, senders stored as a JSON
// array; the driver's noRows error becomes relayserver.ErrNotFound.
func ScanSenderList(r Row, noRows error, target string) (relayserver.SenderList, error) {
	l := relayserver.SenderList{TargetPubkey: target}
	var senders string
	var iat int64
	err := r.Scan(&senders, &iat, &l.Record, &l.Sig)
	if errors.Is(err, noRows) {
		return l, relayserver.ErrNotFound
	}
	if err != nil {
		return l, fmt.Errorf("sender list: %w", err)
	}
	if err := json.Unmarshal([]byte(senders), &l.Senders); err != nil {
		return l, fmt.Errorf("sender list: stored senders: %w", err)
	}
	l.IAT = FromMS(iat)
	return l, nil
}

// Senders is l's senders (never nil) and their JSON array, as ScanSenderList reads them.
func Senders(l relayserver.SenderList) ([]string, string, error) {
	senders := l.Senders
	if senders == nil {
		senders = []string{}
	}
	js, err := json.Marshal(senders)
	if err != nil {
		return nil, "", fmt.Errorf("put sender list: %w", err)
	}
	return senders, string(js), nil
}

// ScanItems reads rows of (target, seq, kind, item_id, sender, wire_hash, accepted_at,
// expires_at); hash gives the scan destination of wire_hash (the stores encode it differently).
func ScanItems(rows Rows, hash func(*string) any) ([]relayserver.Item, error) {
	var out []relayserver.Item
	for rows.Next() {
		var it relayserver.Item
		var kind string
		var at, exp int64
		if err := rows.Scan(&it.Target, &it.Seq, &kind, &it.ItemID, &it.Sender, hash(&it.WireHash),
			&at, &exp); err != nil {
			return nil, err
		}
		it.Kind, it.AcceptedAt, it.ExpiresAt = relayserver.Kind(kind), FromMS(at), FromMS(exp)
		out = append(out, it)
	}
	return out, rows.Err()
}

// ScanDedup fills d from a row of (wire_hash, seq, accepted_at); hash gives the scan destination
// of wire_hash. The driver's noRows error becomes relayserver.ErrNotFound.
func ScanDedup(r Row, noRows error, d relayserver.Dedup, hash func(*string) any) (relayserver.Dedup, error) {
	var at int64
	err := r.Scan(hash(&d.WireHash), &d.Seq, &at)
	if errors.Is(err, noRows) {
		return d, relayserver.ErrNotFound
	}
	if err != nil {
		return d, fmt.Errorf("dedup: %w", err)
	}
	d.AcceptedAt = FromMS(at)
	return d, nil
}
