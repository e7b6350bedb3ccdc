package host

import (
	"bytes"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"go.etcd.io/bbolt"

	"github.com/agentmbx/agentmbx/mbx"
)

// The mail indexes (schema 2). Every key is k1 ‖ 0x00 ‖ msg id; values are empty. They are written
// in the transaction that stores the message or the copy, and never pruned (messages are not
// deleted); a store of schema 1 gets them built once when it is opened.
var (
	// bucketIdxTerms holds term ‖ msg id for each distinct word of a message's subject and body.
	bucketIdxTerms = []byte("idx_terms")
	// bucketIdxThreads holds thread ‖ msg id.
	bucketIdxThreads = []byte("idx_threads")
	// bucketIdxAgent holds agent ‖ msg id for the mail an agent holds a copy of or sent.
	bucketIdxAgent = []byte("idx_agent")
	// bucketFresh holds agent ‖ msg id for the copies in state delivered: new mail not yet shown.
	bucketFresh = []byte("fresh")
	// bucketIdxKnown holds host ‖ agent name for the agents of other hosts this host has had
	// mail or a delivery receipt from, or sent mail to by name.
	bucketIdxKnown = []byte("idx_known")

	indexBuckets = [][]byte{bucketIdxTerms, bucketIdxThreads, bucketIdxAgent, bucketFresh, bucketIdxKnown}
)

// maxTermBytes cuts long words: the index keeps their first 64 bytes (whole runes), and a query
// word is cut the same way, so long words still match.
const maxTermBytes = 64

// terms returns the distinct words of the texts, lower-cased: runs of letters and digits.
func terms(texts ...string) []string {
	seen := map[string]bool{}
	var out []string
	for _, t := range texts {
		for _, w := range strings.FieldsFunc(strings.ToLower(t), notWordRune) {
			w = cutTerm(w)
			if !seen[w] {
				seen[w] = true
				out = append(out, w)
			}
		}
	}
	return out
}

func notWordRune(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) }

func cutTerm(w string) string {
	if len(w) <= maxTermBytes {
		return w
	}
	n := maxTermBytes
	for n > 0 && !utf8.RuneStart(w[n]) {
		n--
	}
	return w[:n]
}

// threadOf is the thread a message belongs to: its thread field, else its own id.
func threadOf(m *storedMessage) string {
	if m.Thread == "" || strings.IndexByte(m.Thread, 0) >= 0 {
		return m.ID
	}
	return m.Thread
}

// indexMessageTx adds a newly stored message to the term and thread indexes.
func indexMessageTx(tx *bbolt.Tx, m *storedMessage) error {
	tb := tx.Bucket(bucketIdxTerms)
	for _, t := range terms(m.Subject, m.Body) {
		if err := tb.Put(key2(t, m.ID), nil); err != nil {
			return err
		}
	}
	return tx.Bucket(bucketIdxThreads).Put(key2(threadOf(m), m.ID), nil)
}

// indexAgentTx records that agent holds or sent message id.
func indexAgentTx(tx *bbolt.Tx, agent, id string) error {
	return tx.Bucket(bucketIdxAgent).Put(key2(agent, id), nil)
}

// noteKnownTx records the agent of address name@host when host is origin (the peer that vouched
// for it); origin "" records nothing.
func noteKnownTx(tx *bbolt.Tx, address, origin string) error {
	if origin == "" {
		return nil
	}
	a, err := mbx.ParseAddress(address)
	if err != nil || a.Kind != mbx.AddrAgent || a.Host != origin {
		return nil
	}
	return tx.Bucket(bucketIdxKnown).Put(key2(a.Host, a.Name), nil)
}

// noteNamedTx records the agents a message addressed by name@host.
func noteNamedTx(tx *bbolt.Tx, named map[string][]string) error {
	for host, names := range named {
		for _, n := range names {
			if err := tx.Bucket(bucketIdxKnown).Put(key2(host, n), nil); err != nil {
				return err
			}
		}
	}
	return nil
}

// buildIndexesTx fills the mail indexes from a store of schema 1: every message, copy and sent
// record. It runs once, in the transaction that opens such a store.
func buildIndexesTx(tx *bbolt.Tx) error {
	for _, name := range indexBuckets {
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
		return noteKnownTx(tx, m.From, m.Origin)
	}); err != nil {
		return fmt.Errorf("index messages: %w", err)
	}
	box := tx.Bucket(bucketMbox)
	if err := box.ForEach(func(k, _ []byte) error {
		var e mboxEntry
		if _, err := getJSON(box, k, &e); err != nil {
			return err
		}
		if err := tx.Bucket(bucketIdxAgent).Put(bytes.Clone(k), nil); err != nil {
			return err
		}
		if e.State == mbx.ReceiptDelivered {
			return tx.Bucket(bucketFresh).Put(bytes.Clone(k), nil)
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
		if err := noteNamedTx(tx, rec.Named); err != nil {
			return err
		}
		return indexAgentTx(tx, rec.From, rec.ID)
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
		return noteKnownTx(tx, string(recipient), r.Host)
	})
}
