package host

import (
	"bytes"
	"fmt"
	"strings"

	"go.etcd.io/bbolt"

	"github.com/agentmbx/agentmbx/host/mailindex"
	"github.com/agentmbx/agentmbx/mbx"
)

// The mail indexes (schema 2, package mailindex) are written with each message and copy; a store
// of schema 1 gets them built once when it is opened (buildIndexesTx).

// threadOf is the thread a message belongs to: its thread field, else its own id.
func threadOf(m *storedMessage) string {
	if m.Thread == "" || strings.IndexByte(m.Thread, 0) >= 0 {
		return m.ID
	}
	return m.Thread
}

// indexMessageTx adds a newly stored message to the word and thread indexes.
func indexMessageTx(tx *bbolt.Tx, m *storedMessage) error {
	return mailindex.PutMessageTx(tx, m.ID, threadOf(m), m.Subject, m.Body)
}

// buildIndexesTx fills the mail indexes from a store of schema 1: every message, copy and sent
// record. It runs once, in the transaction that opens such a store.
func buildIndexesTx(tx *bbolt.Tx) error {
	for _, name := range mailindex.Buckets {
		if _, err := tx.CreateBucketIfNotExists(name); err != nil {
			return err
		}
	}
	mb := tx.Bucket(bucketMessages)
	if err := mb.ForEach(func(k, _ []byte) error {
		var m storedMessage
		if _, err := getJSON(mb, k, &m); err != nil {
			return err
		}
		if err := indexMessageTx(tx, &m); err != nil {
			return err
		}
		return mailindex.NoteKnownTx(tx, m.From, m.Origin)
	}); err != nil {
		return fmt.Errorf("index messages: %w", err)
	}
	box := tx.Bucket(bucketMbox)
	if err := box.ForEach(func(k, _ []byte) error {
		var e mboxEntry
		if _, err := getJSON(box, k, &e); err != nil {
			return err
		}
		if err := tx.Bucket(mailindex.Agent).Put(bytes.Clone(k), nil); err != nil {
			return err
		}
		if e.State == mbx.ReceiptDelivered {
			return tx.Bucket(mailindex.Fresh).Put(bytes.Clone(k), nil)
		}
		return nil
	}); err != nil {
		return fmt.Errorf("index mailboxes: %w", err)
	}
	sb := tx.Bucket(bucketSent)
	if err := sb.ForEach(func(k, _ []byte) error {
		var rec sentRecord
		if _, err := getJSON(sb, k, &rec); err != nil {
			return err
		}
		if err := mailindex.NoteNamedTx(tx, rec.Named); err != nil {
			return err
		}
		return mailindex.PutAgentTx(tx, rec.From, rec.ID)
	}); err != nil {
		return fmt.Errorf("index sent mail: %w", err)
	}
	rs := tx.Bucket(bucketRState)
	return rs.ForEach(func(k, _ []byte) error {
		var r rstateRecord
		if _, err := getJSON(rs, k, &r); err != nil {
			return err
		}
		_, recipient, _ := bytes.Cut(k, []byte{0})
		return mailindex.NoteKnownTx(tx, string(recipient), r.Host)
	})
}
