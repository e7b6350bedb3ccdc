package mailstore

import (
	"bytes"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"go.etcd.io/bbolt"

	"github.com/agentmbx/agentmbx/mbx"
)

// The mail indexes: every key is k1 ‖ 0x00 ‖ k2 (names and ids hold no NUL) and every value is
// empty. They are written in the transaction that stores the message or the copy and never
// pruned (messages are not deleted).
var (
	// bucketTerms holds term ‖ msg id for each distinct word of a message's subject and body.
	bucketTerms = []byte("idx_terms")
	// bucketThreads holds thread ‖ msg id.
	bucketThreads = []byte("idx_threads")
	// bucketAgent holds agent ‖ msg id for the mail an agent holds a copy of or sent.
	bucketAgent = []byte("idx_agent")
	// bucketFresh holds agent ‖ msg id for the copies in state delivered: new mail not yet shown.
	bucketFresh = []byte("fresh")
	// bucketKnown holds host ‖ agent name for the agents of other hosts the host has had mail or
	// a delivery receipt from, or sent mail to by name.
	bucketKnown = []byte("idx_known")

	// IndexBuckets are the index buckets (schema 2 of the host's store; BuildIndexesTx fills them
	// for a store of schema 1).
	IndexBuckets = [][]byte{bucketTerms, bucketThreads, bucketAgent, bucketFresh, bucketKnown}
)

// key is a ‖ 0x00 ‖ b.
func key(a, b string) []byte {
	k := make([]byte, 0, len(a)+1+len(b))
	k = append(k, a...)
	k = append(k, 0)
	return append(k, b...)
}

// maxTermBytes cuts long words: the index keeps their first 64 bytes (whole runes), and a query
// word is cut the same way, so long words still match.
const maxTermBytes = 64

// words returns the distinct words of the texts, lower-cased: runs of letters and digits, each
// cut to maxTermBytes.
func words(texts ...string) []string {
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

// indexMessageTx adds a newly stored message to the word and thread indexes.
func indexMessageTx(tx *bbolt.Tx, m *Message) error {
	tb := tx.Bucket(bucketTerms)
	for _, t := range words(m.Subject, m.Body) {
		if err := tb.Put(key(t, m.ID), nil); err != nil {
			return err
		}
	}
	return tx.Bucket(bucketThreads).Put(key(threadOf(m), m.ID), nil)
}

// putAgentTx records that agent holds or sent message id.
func putAgentTx(tx *bbolt.Tx, agent, id string) error {
	return tx.Bucket(bucketAgent).Put(key(agent, id), nil)
}

// NoteSentTx records that local agent from sent message id (search and threads show it as the
// agent's mail) and the agents of other hosts it named (host → names; KnownAgents lists them).
func NoteSentTx(tx *bbolt.Tx, from, id string, named map[string][]string) error {
	if err := putAgentTx(tx, from, id); err != nil {
		return err
	}
	for host, names := range named {
		for _, n := range names {
			if err := tx.Bucket(bucketKnown).Put(key(host, n), nil); err != nil {
				return err
			}
		}
	}
	return nil
}

// NoteKnownTx records the agent of address name@host when host is origin (the peer that vouched
// for it); origin "" records nothing.
func NoteKnownTx(tx *bbolt.Tx, address, origin string) error {
	if origin == "" {
		return nil
	}
	a, err := mbx.ParseAddress(address)
	if err != nil || a.Kind != mbx.AddrAgent || a.Host != origin {
		return nil
	}
	return tx.Bucket(bucketKnown).Put(key(a.Host, a.Name), nil)
}

// threadOf is the thread a message belongs to: its thread field, else its own id.
func threadOf(m *Message) string {
	if m.Thread == "" || strings.IndexByte(m.Thread, 0) >= 0 {
		return m.ID
	}
	return m.Thread
}

// BuildIndexesTx fills the mail indexes from the messages and copies of a store of schema 1. It
// runs once, in the transaction that opens such a store; the host then adds its sent mail
// (NoteSentTx) and the receipts it accepted (NoteKnownTx).
func BuildIndexesTx(tx *bbolt.Tx) error {
	for _, name := range IndexBuckets {
		if _, err := tx.CreateBucketIfNotExists(name); err != nil {
			return err
		}
	}
	mb := tx.Bucket(bucketMessages)
	if err := mb.ForEach(func(k, _ []byte) error {
		var m Message
		if _, err := getJSON(mb, k, &m); err != nil {
			return err
		}
		if err := indexMessageTx(tx, &m); err != nil {
			return err
		}
		return NoteKnownTx(tx, m.From, m.Origin)
	}); err != nil {
		return fmt.Errorf("index messages: %w", err)
	}
	box := tx.Bucket(bucketMbox)
	if err := box.ForEach(func(k, _ []byte) error {
		var c Copy
		if _, err := getJSON(box, k, &c); err != nil {
			return err
		}
		if err := tx.Bucket(bucketAgent).Put(bytes.Clone(k), nil); err != nil {
			return err
		}
		if c.State == mbx.ReceiptDelivered {
			return tx.Bucket(bucketFresh).Put(bytes.Clone(k), nil)
		}
		return nil
	}); err != nil {
		return fmt.Errorf("index mailboxes: %w", err)
	}
	return nil
}
