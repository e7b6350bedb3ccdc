package relayserver

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentmbx/agentmbx/internal/logkey"
	"github.com/agentmbx/agentmbx/mbx"
)

// DenyKind says what a deny entry matches.
type DenyKind string

// Deny kinds.
const (
	// DenyHost matches a host key by its fingerprint (mbx.Fingerprint).
	DenyHost DenyKind = "fingerprint"
	// DenyClient matches the client_id an account token proved at enrolment.
	DenyClient DenyKind = "client_id"
)

// MinDenyFor is the shortest life of a deny entry: the longest account-token lifetime, so a
// token issued before the entry was added has expired before the entry can end.
const MinDenyFor = 15 * time.Minute

// DefaultDenyPollEvery is how often a relay reads the deny list from its store
// (Options.DenyPollEvery): the bound on how late a replica learns of an entry.
const DefaultDenyPollEvery = 5 * time.Second

// DenyEntry is one entry of the operator's deny list (docs/design.md: Enrolment and
// publications). While it is active, matching enrolments are refused and matching enrolled hosts
// are revoked: each must enrol again, which the entry refuses until it ends.
type DenyEntry struct {
	Kind  DenyKind
	Value string // a canonical fingerprint, or a client_id
	// AddedAt is when the operator added it; Until when it ends (zero: when removed).
	AddedAt time.Time
	Until   time.Time
	Note    string
	// ReclaimAt is when the operator last asked to reclaim what the store holds for the keys the
	// entry revoked (`agentmbx relay reclaim`; zero: never); ReclaimedAt when a relay did it, and
	// Reclaimed what it deleted then. A reclaim is to do while ReclaimAt is after ReclaimedAt.
	ReclaimAt   time.Time
	ReclaimedAt time.Time
	Reclaimed   ReclaimResult
}

// ReclaimPending reports whether the entry asks for a reclaim no relay has done yet.
func (d DenyEntry) ReclaimPending() bool { return d.ReclaimAt.After(d.ReclaimedAt) }

// Active reports whether the entry is in force at now.
func (d DenyEntry) Active(now time.Time) bool { return d.Until.IsZero() || now.Before(d.Until) }

// Matches reports whether the entry matches a host key or a client_id ("" matches nothing).
func (d DenyEntry) Matches(hostPubkey, clientID string) bool {
	switch d.Kind {
	case DenyHost:
		return hostPubkey != "" && mbx.Fingerprint(hostPubkey) == d.Value
	case DenyClient:
		return clientID != "" && clientID == d.Value
	}
	return false
}

// String names the entry for messages: "fingerprint 1a2b-…" or "client_id cli-7".
func (d DenyEntry) String() string { return string(d.Kind) + " " + d.Value }

// NewDenyEntry checks an operator's entry: kind and value (a fingerprint in any form
// mbx.ParseFingerprint reads, made canonical; a client_id of 1 to 256 printable characters) and a
// life of at least MinDenyFor (0: until removed).
func NewDenyEntry(kind DenyKind, value string, now time.Time, life time.Duration, note string) (DenyEntry, error) {
	d := DenyEntry{Kind: kind, AddedAt: now, Note: note}
	switch kind {
	case DenyHost:
		fp, err := mbx.ParseFingerprint(value)
		if err != nil {
			return d, fmt.Errorf("%w: %w", ErrBadRequest, err)
		}
		d.Value = fp
	case DenyClient:
		if value == "" || len(value) > 256 || strings.ContainsFunc(value, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
			return d, fmt.Errorf("%w: a client_id is 1 to 256 printable characters", ErrBadRequest)
		}
		d.Value = value
	default:
		return d, fmt.Errorf("%w: deny kind %q (want %s or %s)", ErrBadRequest, kind, DenyHost, DenyClient)
	}
	switch {
	case life < 0:
		return d, fmt.Errorf("%w: a negative duration", ErrBadRequest)
	case life > 0 && life < MinDenyFor:
		return d, fmt.Errorf("%w: an entry lasts at least %s, the longest account-token lifetime", ErrBadRequest, MinDenyFor)
	case life > 0:
		d.Until = now.Add(life)
	}
	if len(note) > 1024 || strings.ContainsFunc(note, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return d, fmt.Errorf("%w: the note is at most 1024 bytes of printable text", ErrBadRequest)
	}
	return d, nil
}

// denyState is a server's view of the deny list: the active entries of its last read of the
// store, and which of them it has applied (revoked their enrolments and woken the pulls).
type denyState struct {
	active  atomic.Pointer[[]DenyEntry]
	mu      sync.Mutex // serializes reloads
	applied map[string]bool
}

func denyKey(d DenyEntry) string {
	return string(d.Kind) + "\x00" + d.Value + "\x00" + d.AddedAt.UTC().Format(time.RFC3339Nano)
}

// deniedBy returns the active entry matching a host key or a client_id.
func (s *Server) deniedBy(hostPubkey, clientID string) (DenyEntry, bool) {
	p := s.deny.active.Load()
	if p == nil {
		return DenyEntry{}, false
	}
	now := s.opt.Clock()
	for _, d := range *p {
		if d.Active(now) && d.Matches(hostPubkey, clientID) {
			return d, true
		}
	}
	return DenyEntry{}, false
}

// ReloadDeny reads the deny list from the store and applies each active entry this server has
// not applied yet: it revokes the matching live enrolments (Tx.DenyRevoke) and wakes every parked
// pull, which reads its enrolment again and ends with the refusal. Every replica sharing a store
// does this for itself (revoking twice changes nothing), so each ends its own pulls.
// RunDenyWatch calls it every Options.DenyPollEvery.
func (s *Server) ReloadDeny(ctx context.Context) error {
	s.deny.mu.Lock()
	defer s.deny.mu.Unlock()
	all, err := s.store.DenyList(ctx)
	if err != nil {
		return fmt.Errorf("relayserver: deny list: %w", err)
	}
	now := s.opt.Clock()
	active := make([]DenyEntry, 0, len(all))
	for _, d := range all {
		if d.Active(now) {
			active = append(active, d)
		}
	}
	s.deny.active.Store(&active)
	seen := make(map[string]bool, len(active))
	woke := false
	for _, d := range active {
		k := denyKey(d)
		seen[k] = true
		if s.deny.applied[k] {
			continue
		}
		var keys []string
		err := s.store.Update(ctx, func(tx Tx) error {
			var err error
			keys, err = tx.DenyRevoke(d, now)
			return err
		})
		if err != nil {
			return fmt.Errorf("relayserver: apply deny entry %s: %w", d, err)
		}
		s.deny.applied[k] = true
		woke = true
		if len(keys) > 0 {
			s.log.Warn("deny list revoked enrolments", logkey.DenyEntry, d.String(), logkey.Revoked, len(keys))
		}
	}
	for k := range s.deny.applied {
		if !seen[k] {
			delete(s.deny.applied, k)
		}
	}
	for _, d := range active {
		if !d.ReclaimPending() {
			continue
		}
		keys, res, ok, err := ApplyReclaim(ctx, s.store, d, now)
		if err != nil {
			return fmt.Errorf("relayserver: reclaim for deny entry %s: %w", d, err)
		}
		if ok {
			s.cap.free()
			woke = true
			s.log.Warn("reclaimed the space of denied keys", logkey.DenyEntry, d.String(), logkey.Revoked, len(keys),
				logkey.ReclaimedItems, res.Items, logkey.ReclaimedBytes, res.Bytes, logkey.DedupRows, res.DedupRows)
		}
	}
	if woke {
		s.polls.wakeAll()
	}
	return nil
}

// RequestReclaim asks for a reclaim of what store holds for the keys the entry of kind and value
// (a fingerprint in any form) revoked: a running relay does it within its Options.DenyPollEvery
// (ReloadDeny), or the caller with ApplyReclaim. It returns the entry: ErrNotFound when there is
// none, ErrBadRequest when it has ended (its keys may have enrolled again).
func RequestReclaim(ctx context.Context, store DenyStore, kind DenyKind, value string, now time.Time) (DenyEntry, error) {
	if kind == DenyHost {
		fp, err := mbx.ParseFingerprint(value)
		if err != nil {
			return DenyEntry{}, fmt.Errorf("%w: %w", ErrBadRequest, err)
		}
		value = fp
	}
	l, err := store.DenyList(ctx)
	if err != nil {
		return DenyEntry{}, err
	}
	i := slices.IndexFunc(l, func(d DenyEntry) bool { return d.Kind == kind && d.Value == value })
	if i < 0 {
		return DenyEntry{}, fmt.Errorf("deny entry %s %s: %w", kind, value, ErrNotFound)
	}
	entry := l[i]
	if !entry.Active(now) {
		return entry, fmt.Errorf("%w: deny entry %s ended at %s: its keys may have enrolled again", ErrBadRequest, entry, mbx.ISOTime(entry.Until))
	}
	err = store.UpdateDeny(ctx, func(w DenyWriter) error {
		ok, err := w.MarkReclaim(kind, value, now)
		if err == nil && !ok {
			err = fmt.Errorf("deny entry %s %s: %w", kind, value, ErrNotFound)
		}
		return err
	})
	entry.ReclaimAt = now
	return entry, err
}

// ApplyReclaim does the reclaim entry d asks for (DenyEntry.ReclaimPending) on store, in one
// unit: it revokes the live enrolments d matches (as applying d does), then deletes what the store
// holds for every key d revoked (Tx.Reclaim) and records the result in the entry. ok is false when
// there was nothing to do (another relay sharing the store took it first). A relay runs it from
// ReloadDeny; `agentmbx relay reclaim` runs it itself when no relay serves the SQLite store.
func ApplyReclaim(ctx context.Context, store Store, d DenyEntry, now time.Time) (keys []string, res ReclaimResult, ok bool, err error) {
	err = store.Update(ctx, func(tx Tx) error {
		keys, res, ok = nil, ReclaimResult{}, false
		took, err := tx.TakeReclaim(d.Kind, d.Value, now)
		if err != nil || !took {
			return err
		}
		if _, err := tx.DenyRevoke(d, now); err != nil {
			return err
		}
		if keys, err = tx.DeniedKeys(d); err != nil {
			return err
		}
		for _, k := range keys {
			r, err := tx.Reclaim(k)
			if err != nil {
				return err
			}
			res.Add(r)
		}
		res.Keys = int64(len(keys))
		ok = true
		return tx.ReclaimDone(d.Kind, d.Value, res)
	})
	if err != nil {
		return nil, ReclaimResult{}, false, err
	}
	return keys, res, ok, nil
}

// RunDenyWatch reloads the deny list every Options.DenyPollEvery until ctx ends.
func (s *Server) RunDenyWatch(ctx context.Context) {
	tick := time.NewTicker(s.opt.DenyPollEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if err := s.ReloadDeny(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("deny list reload failed", logkey.Err, err)
		}
	}
}

// deniedEnrolment is the refusal of a hop by an enrolment the deny list revoked, or nil.
func deniedEnrolment(e Enrolment) error {
	if e.DeniedAt.IsZero() {
		return nil
	}
	return fmt.Errorf("host key %s: %w: the relay operator's deny list revoked this enrolment; enrol again once the entry ends",
		mbx.Fingerprint(e.HostPubkey), ErrDenied)
}

// expiredProof is the refusal of a hop by an enrolment whose proof (an account token) expired on a
// relay that admits no host without one, or nil. The host enrols again with a fresh token, as it
// does after any 403.
func (s *Server) expiredProof(e Enrolment) error {
	if !s.proofRequired || !e.AuthExpired(s.opt.Clock()) {
		return nil
	}
	return fmt.Errorf("host key %s: %w: the account token it enrolled with expired at %s; enrol again with a fresh token",
		mbx.Fingerprint(e.HostPubkey), ErrDenied, e.AuthUntil.UTC().Format(time.RFC3339))
}

// DenyWriter is the write side of the deny list.
type DenyWriter interface {
	// PutDeny adds d, replacing the entry of the same kind and value, and deletes the entries
	// that ended before d.AddedAt.
	PutDeny(d DenyEntry) error
	// DeleteDeny deletes the entry of kind and value and reports whether there was one.
	DeleteDeny(kind DenyKind, value string) (bool, error)
	// MarkReclaim sets ReclaimAt of the entry of kind and value and reports whether there is one.
	MarkReclaim(kind DenyKind, value string, at time.Time) (bool, error)
}

// DenyStore is what the operator's deny commands use: a store's deny list and an atomic write of
// it. The SQLite store offers one that works while a relay serves the store (the deny table is
// the only one another process writes then); on PostgreSQL it is the store itself.
type DenyStore interface {
	DenyList(ctx context.Context) ([]DenyEntry, error)
	UpdateDeny(ctx context.Context, fn func(DenyWriter) error) error
}

// AddDeny adds (or replaces) an entry of the deny list. A running relay applies it within its
// Options.DenyPollEvery.
func AddDeny(ctx context.Context, store DenyStore, d DenyEntry) error {
	return store.UpdateDeny(ctx, func(w DenyWriter) error { return w.PutDeny(d) })
}

// RemoveDeny removes the entry of kind and value (a fingerprint in any form); ErrNotFound when
// there is none. Enrolments it revoked stay revoked: those hosts enrol again, which a host does
// by itself.
func RemoveDeny(ctx context.Context, store DenyStore, kind DenyKind, value string) error {
	if kind == DenyHost {
		fp, err := mbx.ParseFingerprint(value)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrBadRequest, err)
		}
		value = fp
	}
	return store.UpdateDeny(ctx, func(w DenyWriter) error {
		ok, err := w.DeleteDeny(kind, value)
		if err == nil && !ok {
			err = fmt.Errorf("deny entry %s %s: %w", kind, value, ErrNotFound)
		}
		return err
	})
}
