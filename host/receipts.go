package host

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.etcd.io/bbolt"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/checkpoint"
	"github.com/agentmbx/agentmbx/host/mailstore"
	"github.com/agentmbx/agentmbx/internal/logkey"
	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/outbox"
	"github.com/agentmbx/agentmbx/quarantine"
)

// Delivery receipts, both ways.
//
// As a recipient: every state change of a copy of mail from another host (delivered, notified,
// read, acked) is signed here and queued as an outbox row of kind receipt for the sending host,
// in the transaction that changes the state. The outbox loop sends queued receipts in batches
// (POST /v1/receipts) with the outbox's backoff.
//
// As a sender: a peer's receipts are applied with the acceptReceipt rules (mbx.AcceptReceipt over
// this host's store, the receiptBook below); an accepted one is stored in rstate and, as every
// receipt is delivered or later, settles the outbox row (message, host) to done in the same
// transaction.

// rstateRecord is an rstate bucket value: the last accepted receipt for (msg, recipient).
type rstateRecord struct {
	Host  string           `json:"host"`
	State mbx.ReceiptState `json:"state"`
	Seq   int64            `json:"seq"`
	At    string           `json:"at"`
	Note  string           `json:"note,omitempty"`
	Did   string           `json:"did,omitempty"`
}

// queueReceiptTx signs the receipt of agent's copy e of msgID and queues it for host origin. A
// host that is no longer paired gets none (nothing is ever sent to an unpinned host).
func (h *Host) queueReceiptTx(tx *bbolt.Tx, origin, msgID, agent string, e mailstore.Copy, now time.Time) error {
	p, err := peerTx(tx, origin)
	if errors.Is(err, api.ErrUnpaired) {
		return nil
	} else if err != nil {
		return err
	}
	s, err := mbx.SignReceipt(h.key, h.name, mbx.ReceiptInput{
		Msg: msgID, Agent: agent, State: e.State, At: mbx.ISOTime(now), Note: e.Note, Seq: e.Seq,
	})
	if err != nil {
		return fmt.Errorf("receipt for %s: %w", msgID, err)
	}
	wire, err := s.Wire()
	if err != nil {
		return fmt.Errorf("receipt for %s: %w", msgID, err)
	}
	_, err = h.ob.In(tx).Add(outbox.NewRow{
		Kind: outbox.KindReceipt, ItemID: s.ItemID(), Host: p.Host, HostKey: p.HostPubkey,
		Wire: wire, Agent: agent, Transport: outbox.TransportLAN,
	})
	if errors.Is(err, outbox.ErrExists) {
		return nil // the same receipt is queued already
	}
	return err
}

// receiptBook is mbx.ReceiptBook over a transaction of this host's store.
type receiptBook struct {
	tx  *bbolt.Tx
	err error // the first store error met (the book's methods cannot return one)
}

func (b *receiptBook) fail(err error) {
	if b.err == nil {
		b.err = err
	}
}

func (b *receiptBook) PeerKeys(host string) ([]string, bool) {
	p, err := peerTx(b.tx, host)
	if err != nil {
		if !errors.Is(err, api.ErrUnpaired) {
			b.fail(err)
		}
		return nil, false
	}
	return append([]string{p.HostPubkey}, p.RetiredKeys...), true
}

func (b *receiptBook) SentTo(msg, host string) (bool, bool) {
	var s sentRecord
	found, err := getJSON(b.tx.Bucket(bucketSent), []byte(msg), &s)
	if err != nil {
		b.fail(err)
		return false, false
	}
	if !found {
		return false, false
	}
	return true, slices.Contains(s.Hosts, host)
}

func (b *receiptBook) StoredReceipt(msg, recipient string) *mbx.StoredReceipt {
	var r rstateRecord
	found, err := getJSON(b.tx.Bucket(bucketRState), key2(msg, recipient), &r)
	if err != nil {
		b.fail(err)
		return nil
	}
	if !found {
		return nil
	}
	return &mbx.StoredReceipt{State: r.State, Seq: r.Seq}
}

func (b *receiptBook) ReceiptCount(msg, host string) int {
	n := 0
	p := prefix(msg)
	suffix := []byte("@" + host)
	c := b.tx.Bucket(bucketRState).Cursor()
	for k, _ := c.Seek(p); k != nil && bytes.HasPrefix(k, p); k, _ = c.Next() {
		if bytes.HasSuffix(k, suffix) {
			n++
		}
	}
	return n
}

// receiptStatus is the answer for one receipt of a LAN batch (and the relay checkpoint's verdict for
// a receipt item): accepted, duplicate, stale, or rejected:<reason>.
type receiptStatus string

// acceptReceiptTx applies one signed receipt (raw JSON {rec, sig}) from hop ("" when it came
// through the relay) inside tx: the acceptReceipt checks, then on acceptance the rstate upsert
// and the settling of the outbox row to done, all in tx. It returns the receipt's item id and
// accepted, duplicate, stale or rejected:<reason>, and for rejected the rule's error (refusal);
// err is a store error only (roll back).
func (h *Host) acceptReceiptTx(tx *bbolt.Tx, item []byte, hop string) (itemID string, st receiptStatus, refusal, err error) {
	book := &receiptBook{tx: tx}
	s, verdict, rerr := mbx.AcceptReceipt(book, item, hop)
	if book.err != nil {
		return "", "", nil, book.err
	}
	itemID = s.ItemID()
	if s.Rec.Msg == "" {
		itemID = ""
	}
	if rerr != nil {
		return itemID, receiptStatus(mbx.StatusRejectedPrefix + rerr.Error()), rerr, nil
	}
	if verdict != mbx.ReceiptAccepted {
		return itemID, receiptStatus(verdict.String()), nil, nil
	}
	host := s.Rec.Host()
	r := rstateRecord{Host: host, State: s.Rec.State, Seq: s.Rec.Seq, At: s.Rec.At}
	if s.Rec.Note != nil {
		r.Note = *s.Rec.Note
	}
	if s.Rec.Did != nil {
		r.Did = *s.Rec.Did
	}
	if err := putJSON(tx.Bucket(bucketRState), key2(s.Rec.Msg, s.Rec.Recipient), r); err != nil {
		return itemID, "", nil, err
	}
	if err := mailstore.NoteKnownTx(tx, s.Rec.Recipient, host); err != nil {
		return itemID, "", nil, err
	}
	if _, from, err := h.ob.In(tx).Settle(s.Rec.Msg, host); err != nil {
		if !errors.Is(err, outbox.ErrNotFound) {
			return itemID, "", nil, err
		}
	} else if from != outbox.StateDone && from != outbox.StatePending && from != outbox.StateRelayAccepted {
		h.log.Info("late delivery receipt settled an ended row", logkey.Msg, s.Rec.Msg, logkey.Peer, host, logkey.Was, from.String())
	}
	if err := tx.Bucket(bucketMeta).Put(heardKey(host), []byte(mbx.ISOTime(h.clock()))); err != nil {
		return itemID, "", nil, err
	}
	tx.OnCommit(func() { h.ops.Receipt() })
	return itemID, receiptStatus(mbx.StatusAccepted), nil, nil
}

// receiptVerdict is the relay checkpoint's verdict for a receipt that came as an item or inside
// a receipts envelope: accepted, a duplicate (duplicate or stale), or rejected with the cause the
// refusal's rule names.
func receiptVerdict(st receiptStatus, refusal error) checkpoint.Verdict {
	switch {
	case st == mbx.StatusAccepted:
		return checkpoint.Accepted()
	case refusal != nil:
		cause := quarantine.CauseRefused
		switch {
		case errors.Is(refusal, mbx.ErrReceiptSignature):
			cause = quarantine.CauseBadSignature
		case errors.Is(refusal, mbx.ErrReceiptNotPaired):
			cause = quarantine.CauseUnpaired
		case errors.Is(refusal, mbx.ErrReceiptInvalid), errors.Is(refusal, mbx.ErrReceiptWire):
			cause = quarantine.CauseMalformed
		}
		return checkpoint.Rejected(cause, refusal.Error())
	default:
		return checkpoint.Duplicate()
	}
}

// heardKey is the meta key recording that host has sent a delivery receipt (for the wording of
// unconfirmed alerts: a host that never sent one may be older than 0.5.3).
func heardKey(host string) []byte { return []byte("heard:" + host) }

// acceptReceipts applies a batch of signed receipts from hop ("" for the relay) in one
// transaction and returns one result per receipt, in order.
func (h *Host) acceptReceipts(items []json.RawMessage, hop string) ([]mbx.ReceiptResult, error) {
	out := make([]mbx.ReceiptResult, len(items))
	err := h.db.Update(func(tx *bbolt.Tx) error {
		if hop != "" {
			// A verified hop from the host: it is up, so its rows are due now.
			if _, err := h.ob.In(tx).MakeDue(hop); err != nil {
				return err
			}
		}
		for i, it := range items {
			id, st, _, err := h.acceptReceiptTx(tx, it, hop)
			if err != nil {
				return err
			}
			out[i] = mbx.ReceiptResult{Item: id, Status: string(st)}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("host: accept receipts: %w", err)
	}
	return out, nil
}
