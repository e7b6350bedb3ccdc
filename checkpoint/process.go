package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"go.etcd.io/bbolt"

	"github.com/agentmbx/agentmbx/internal/logkey"
	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/quarantine"
)

// Item is one relay item handed to a Handler.
type Item struct {
	Relay string // the caller's identifier of the relay
	Epoch string
	Seq   int64
	// Kind is mbx.ItemKindEnvelope, mbx.ItemKindReceipt or mbx.ItemKindExpired.
	Kind   string
	ItemID string
	// Sender is the pushing host's base64 key as the relay reports it (the relay's own key for
	// an expiry notice). The relay authenticated the push by this key; the handler still checks
	// every signature inside the wire bytes.
	Sender string
	// Wire is the exact bytes the sender pushed. It is valid only during the call.
	Wire []byte
}

// Outcome is what a Handler did with an item.
type Outcome uint8

// Outcomes. Accepted and duplicate items are done; a rejected item is quarantined and then done.
const (
	OutcomeAccepted Outcome = iota + 1
	OutcomeDuplicate
	OutcomeRejected
)

var outcomeNames = [...]string{OutcomeAccepted: "accepted", OutcomeDuplicate: "duplicate", OutcomeRejected: "rejected"}

// String returns the outcome's name.
func (o Outcome) String() string {
	if o >= OutcomeAccepted && o <= OutcomeRejected {
		return outcomeNames[o]
	}
	return fmt.Sprintf("Outcome(%d)", uint8(o))
}

// Verdict is a Handler's answer for one item.
type Verdict struct {
	Outcome Outcome
	// Cause and Reason say why a rejected item was refused; they are stored in the quarantine.
	Cause  quarantine.Cause
	Reason string
}

// Accepted is the verdict for an item the handler stored.
func Accepted() Verdict { return Verdict{Outcome: OutcomeAccepted} }

// Duplicate is the verdict for an item the handler had already stored (dedup by message id, or a
// receipt that changes nothing).
func Duplicate() Verdict { return Verdict{Outcome: OutcomeDuplicate} }

// Rejected is the verdict for an item the handler refuses; it goes to the quarantine.
func Rejected(cause quarantine.Cause, reason string) Verdict {
	return Verdict{Outcome: OutcomeRejected, Cause: cause, Reason: reason}
}

// Handler receives relay items, one at a time and in seq order, inside the bbolt transaction that
// also moves the receive position over them. It must keep every effect inside tx: the
// transaction may be rolled back (when a later item's handler fails, the page is redone without
// it), and the same item may then be handed over again. Effects that must wait for the commit
// (waking a reader, sending a receipt) go through tx.OnCommit.
//
// A verdict says what became of the item. An error says the handler could not decide now (storage
// trouble, shutdown): the item is not done, and neither is anything after it.
type Handler interface {
	HandleEnvelope(tx *bbolt.Tx, it Item) (Verdict, error)
	HandleReceipt(tx *bbolt.Tx, it Item) (Verdict, error)
	HandleExpired(tx *bbolt.Tx, it Item) (Verdict, error)
}

// Result is what ProcessPage did.
type Result struct {
	// Position is the committed position after the call.
	Position Position
	// Reset is non-zero when the call reset the position (epoch change or rewind). The caller
	// re-pulls from 0 and, as a sender, re-pushes its relay-accepted rows (docs/design.md: Epochs,
	// restarts and restores).
	Reset ResetReason
	// Accepted, Duplicates and Quarantined count the items done by this call; Skipped those at
	// or below the position (a repeated page).
	Accepted, Duplicates, Quarantined, Skipped int
	// HeadSeq and More are the page's.
	HeadSeq int64
	More    bool
}

// Done is the number of items this call moved the position over.
func (r Result) Done() int { return r.Accepted + r.Duplicates + r.Quarantined }

// ProcessPage applies one pull answer (page, pulled with after=after) from relay, in one
// transaction that commits the handled items, the quarantined ones and the new received_through
// together. Items are taken in seq order whatever order the page has; items at or below
// received_through are skipped, so a repeated page changes nothing. The caller acks the relay
// through Result.Position.ReceivedThrough only after ProcessPage returned (the commit is done).
//
// A page of another epoch than the position's, or whose head_seq is below received_through in the
// same epoch, resets the position to 0 (Result.Reset) and is processed only when it was pulled
// from 0. A page pulled after a point beyond received_through fails with ErrStalePage and changes
// nothing.
//
// When the handler fails on an item, the items before it are committed, the position stops just
// before it, and the error wraps ErrHandler and the handler's error.
func (s *Store) ProcessPage(ctx context.Context, relay string, after int64, page mbx.PullResponse, h Handler) (Result, error) {
	if err := checkRelay(relay); err != nil {
		return Result{}, fmt.Errorf("checkpoint: process page: %w", err)
	}
	if err := checkEpoch(page.Epoch); err != nil {
		return Result{}, fmt.Errorf("checkpoint: process page of %s: %w", relay, err)
	}
	if after < 0 {
		return Result{}, fmt.Errorf("checkpoint: process page of %s: %w: after %d", relay, ErrInvalid, after)
	}
	if h == nil {
		return Result{}, fmt.Errorf("checkpoint: process page of %s: %w: nil handler", relay, ErrInvalid)
	}
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	items := slices.Clone(page.Items)
	slices.SortStableFunc(items, func(a, b mbx.PullItem) int {
		switch {
		case a.Seq < b.Seq:
			return -1
		case a.Seq > b.Seq:
			return 1
		}
		return 0
	})
	limit := len(items)
	var firstErr error
	for {
		var res Result
		var failed int
		var itemErr error
		err := s.db.Update(func(tx *bbolt.Tx) error {
			var err error
			res, failed, itemErr, err = s.process(tx, relay, after, page, items[:limit], h)
			if err != nil {
				return err
			}
			if itemErr != nil {
				return itemErr // roll back everything, then redo the part before the failure
			}
			return nil
		})
		if itemErr != nil {
			if firstErr == nil {
				firstErr = itemErr
			}
			if failed > 0 || res.Reset != 0 {
				limit = failed
				continue
			}
			pos, perr := s.Position(context.WithoutCancel(ctx), relay)
			if perr != nil {
				return Result{}, errors.Join(firstErr, perr)
			}
			return Result{Position: pos, HeadSeq: page.HeadSeq, More: page.More}, firstErr
		}
		if err != nil {
			return Result{}, err
		}
		if res.Reset != 0 {
			s.logReset(res.Position)
		}
		if res.Quarantined > 0 {
			s.logger.Warn("relay items quarantined", logkey.Relay, relay, logkey.Epoch, page.Epoch, logkey.Count, res.Quarantined)
		}
		return res, firstErr
	}
}

// process runs inside one transaction. A failure of one item is returned as itemErr with its
// index in items (the caller rolls back and redoes items[:failed]); err is a failure of the page.
func (s *Store) process(tx *bbolt.Tx, relay string, after int64, page mbx.PullResponse, items []mbx.PullItem, h Handler) (res Result, failed int, itemErr, err error) {
	t := s.In(tx)
	pos, err := t.Position(relay)
	if err != nil {
		return Result{}, 0, nil, err
	}
	res = Result{HeadSeq: page.HeadSeq, More: page.More}
	now := s.clock()
	changed := false
	switch {
	case pos.Epoch == "":
		pos.Epoch, changed = page.Epoch, true // the first pull from this relay
	case pos.Epoch != page.Epoch:
		pos, res.Reset, changed = pos.reset(page.Epoch, ResetEpochChanged, now), ResetEpochChanged, true
	case page.HeadSeq < pos.ReceivedThrough:
		pos, res.Reset, changed = pos.reset(page.Epoch, ResetRewound, now), ResetRewound, true
	}
	if after > pos.ReceivedThrough {
		if res.Reset == 0 {
			return Result{}, 0, nil, fmt.Errorf("checkpoint: process page of %s: %w: pulled after %d, position %d",
				relay, ErrStalePage, after, pos.ReceivedThrough)
		}
		items = nil // pulled from the old position: nothing on this page may be used
	}
	q := s.q.In(tx)
	for i, pi := range items {
		if pi.Seq <= pos.ReceivedThrough {
			res.Skipped++
			continue
		}
		it := Item{Relay: relay, Epoch: page.Epoch, Seq: pi.Seq, Kind: pi.Kind, ItemID: pi.ItemID, Sender: pi.SenderPubkey}
		v, herr := s.handle(tx, &it, pi, h)
		if herr != nil {
			return res, i, fmt.Errorf("checkpoint: %s seq %d (%s %s): %w: %w", relay, pi.Seq, pi.Kind, pi.ItemID, ErrHandler, herr), nil
		}
		switch v.Outcome {
		case OutcomeAccepted:
			res.Accepted++
		case OutcomeDuplicate:
			res.Duplicates++
		case OutcomeRejected:
			if v.Cause == quarantine.CauseUnpaired && !mbx.ValidPublicKey(pi.SenderPubkey) {
				// Pairing can never release it: the relay named no key.
				v.Cause, v.Reason = quarantine.CauseMalformed, "sender_pubkey is not a host key; "+v.Reason
			}
			_, _, qerr := q.Put(quarantine.Entry{
				Relay: relay, Epoch: page.Epoch, Seq: pi.Seq, ItemID: pi.ItemID, Kind: pi.Kind,
				Sender: pi.SenderPubkey, Cause: v.Cause, Reason: v.Reason, Wire: it.Wire, At: now,
			})
			if qerr != nil {
				return res, i, fmt.Errorf("checkpoint: %s seq %d (%s %s): %w", relay, pi.Seq, pi.Kind, pi.ItemID, qerr), nil
			}
			res.Quarantined++
		}
		pos.ReceivedThrough, pos.UpdatedAt, changed = pi.Seq, now.UTC(), true
	}
	if changed {
		if err := t.put(pos); err != nil {
			return Result{}, 0, nil, fmt.Errorf("checkpoint: process page of %s: %w", relay, err)
		}
	}
	res.Position = pos
	return res, 0, nil, nil
}

// handle decodes the wire bytes and hands the item to h by kind. Undecodable bytes and unknown
// kinds are rejected without asking h. A verdict that is not one of the three is an error.
func (s *Store) handle(tx *bbolt.Tx, it *Item, pi mbx.PullItem, h Handler) (Verdict, error) {
	wire, err := mbx.DecodeB64Lenient(pi.WireB64)
	if err != nil {
		it.Wire = []byte(pi.WireB64) // keep what the relay served
		return Rejected(quarantine.CauseMalformed, "wire_b64 is not base64"), nil
	}
	it.Wire = wire
	var v Verdict
	switch pi.Kind {
	case mbx.ItemKindEnvelope:
		v, err = h.HandleEnvelope(tx, *it)
	case mbx.ItemKindReceipt:
		v, err = h.HandleReceipt(tx, *it)
	case mbx.ItemKindExpired:
		v, err = h.HandleExpired(tx, *it)
	default:
		return Rejected(quarantine.CauseUnknownKind, fmt.Sprintf("unknown item kind %.64q", pi.Kind)), nil
	}
	if err != nil {
		return Verdict{}, err
	}
	switch {
	case v.Outcome == OutcomeAccepted || v.Outcome == OutcomeDuplicate:
	case v.Outcome == OutcomeRejected && v.Cause.Valid():
	default:
		return Verdict{}, fmt.Errorf("%w: verdict %s with cause %s", ErrInvalid, v.Outcome, v.Cause)
	}
	return v, nil
}
