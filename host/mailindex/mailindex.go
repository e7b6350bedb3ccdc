// Package mailindex is the host's mail indexes, kept in the host's bbolt store beside the mail
// itself: the words of each message, its thread, the mail each agent holds a copy of or sent,
// the copies not yet shown (fresh), and the agents of other hosts the host has heard of. Every
// key is k1 ‖ 0x00 ‖ k2 (names and ids hold no NUL) and every value is empty. The host writes
// them in the transaction that stores the message or the copy and never prunes them (messages are
// not deleted). A search intersects sorted id lists of them (Postings, IntersectDesc).
package mailindex

import (
	"bytes"
	"strings"
	"unicode"
	"unicode/utf8"

	"go.etcd.io/bbolt"

	"github.com/agentmbx/agentmbx/mbx"
)

var (
	// Terms holds term ‖ msg id for each distinct word of a message's subject and body.
	Terms = []byte("idx_terms")
	// Threads holds thread ‖ msg id.
	Threads = []byte("idx_threads")
	// Agent holds agent ‖ msg id for the mail an agent holds a copy of or sent.
	Agent = []byte("idx_agent")
	// Fresh holds agent ‖ msg id for the copies in state delivered: new mail not yet shown.
	Fresh = []byte("fresh")
	// Known holds host ‖ agent name for the agents of other hosts the host has had mail or a
	// delivery receipt from, or sent mail to by name.
	Known = []byte("idx_known")

	// Buckets are the index buckets.
	Buckets = [][]byte{Terms, Threads, Agent, Fresh, Known}
)

// Key is a ‖ 0x00 ‖ b.
func Key(a, b string) []byte {
	k := make([]byte, 0, len(a)+1+len(b))
	k = append(k, a...)
	k = append(k, 0)
	return append(k, b...)
}

// MaxTermBytes cuts long words: the index keeps their first 64 bytes (whole runes), and a query
// word is cut the same way, so long words still match.
const MaxTermBytes = 64

// Words returns the distinct words of the texts, lower-cased: runs of letters and digits, each
// cut to MaxTermBytes.
func Words(texts ...string) []string {
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
	if len(w) <= MaxTermBytes {
		return w
	}
	n := MaxTermBytes
	for n > 0 && !utf8.RuneStart(w[n]) {
		n--
	}
	return w[:n]
}

// PutMessageTx adds a newly stored message (its id, thread, subject and body) to the word and
// thread indexes.
func PutMessageTx(tx *bbolt.Tx, id, thread, subject, body string) error {
	tb := tx.Bucket(Terms)
	for _, t := range Words(subject, body) {
		if err := tb.Put(Key(t, id), nil); err != nil {
			return err
		}
	}
	return tx.Bucket(Threads).Put(Key(thread, id), nil)
}

// PutAgentTx records that agent holds or sent message id.
func PutAgentTx(tx *bbolt.Tx, agent, id string) error {
	return tx.Bucket(Agent).Put(Key(agent, id), nil)
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
	return tx.Bucket(Known).Put(Key(a.Host, a.Name), nil)
}

// NoteNamedTx records the agents a message addressed by name@host (host → names).
func NoteNamedTx(tx *bbolt.Tx, named map[string][]string) error {
	for host, names := range named {
		for _, n := range names {
			if err := tx.Bucket(Known).Put(Key(host, n), nil); err != nil {
				return err
			}
		}
	}
	return nil
}

// Postings is one sorted list of message ids: the keys k ‖ 0x00 ‖ id of a bucket.
type Postings struct {
	c      *bbolt.Cursor
	prefix []byte
}

// NewPostings is the list of the ids under k in b.
func NewPostings(b *bbolt.Bucket, k string) *Postings {
	return &Postings{c: b.Cursor(), prefix: append([]byte(k), 0)}
}

// seekLE returns the greatest id in the list that is ≤ id (< id when strict), and false when
// there is none.
func (l *Postings) seekLE(id []byte, strict bool) ([]byte, bool) {
	target := append(bytes.Clone(l.prefix), id...)
	k, _ := l.c.Seek(target)
	if !strict && k != nil && bytes.Equal(k, target) {
		return k[len(l.prefix):], true
	}
	if k == nil {
		k, _ = l.c.Last()
	} else {
		k, _ = l.c.Prev()
	}
	if k == nil || !bytes.HasPrefix(k, l.prefix) {
		return nil, false
	}
	return k[len(l.prefix):], true
}

// IntersectDesc calls visit with each id that is in every list, greatest first, until visit
// returns false or a list runs out (a leapfrog join: each list in turn seeks to the current
// candidate; a list that holds it agrees, one that does not lowers the candidate). It reads about
// as many keys as the shortest list holds in the worst case.
func IntersectDesc(lists []*Postings, visit func(id []byte) bool) {
	x, strict := []byte{0xff}, false
	for {
		agreed := 0
		for i := 0; agreed < len(lists); i = (i + 1) % len(lists) {
			v, ok := lists[i].seekLE(x, strict)
			strict = false
			if !ok {
				return
			}
			if bytes.Equal(v, x) {
				agreed++
			} else {
				x, agreed = v, 1
			}
		}
		if !visit(x) {
			return
		}
		strict = true
	}
}
