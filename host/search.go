package host

import (
	"bytes"
	"context"
	"fmt"
	"strings"

	"go.etcd.io/bbolt"

	"github.com/agentmbx/agentmbx/api"
)

// maxQueryTerms caps the words of a search query.
const maxQueryTerms = 16

// Search finds the messages whose subject or body holds every word of the query (words are runs
// of letters and digits, case folded; a word over 64 bytes matches on its first 64), newest
// first: the agent's mail (copies it holds and mail it sent), or all the host's with no agent.
//
// It intersects sorted id lists of the index (one per query word, and the agent's mail) from the
// newest id down, seeking each list to the current candidate, so it reads about as many keys as
// the shortest list holds in the worst case and stops after Limit+1 matches.
func (h *Host) Search(ctx context.Context, req api.SearchRequest) (api.SearchResult, error) {
	if err := ctx.Err(); err != nil {
		return api.SearchResult{}, err
	}
	ts, limit, err := checkSearch(req)
	if err != nil {
		return api.SearchResult{}, fmt.Errorf("host: search: %w", err)
	}
	out := api.SearchResult{Query: req.Query}
	err = h.db.View(func(tx *bbolt.Tx) error {
		lists := make([]*postings, 0, len(ts)+1)
		for _, t := range ts {
			lists = append(lists, newPostings(tx.Bucket(bucketIdxTerms), t))
		}
		if req.Agent != "" {
			lists = append(lists, newPostings(tx.Bucket(bucketIdxAgent), req.Agent))
		}
		var ids []string
		intersectDesc(lists, func(id []byte) bool {
			ids = append(ids, string(id))
			return len(ids) <= limit
		})
		if len(ids) > limit {
			ids, out.More = ids[:limit], true
		}
		var err error
		out.Messages, err = h.viewsTx(tx, req.Agent, ids)
		return err
	})
	if err != nil {
		return api.SearchResult{}, fmt.Errorf("host: search: %w", err)
	}
	return out, nil
}

// checkSearch validates a search request and returns its words and page size.
func checkSearch(req api.SearchRequest) ([]string, int, error) {
	if req.Agent != "" && !ValidAgentName(req.Agent) {
		return nil, 0, fmt.Errorf("%w: agent name %q", ErrInvalid, req.Agent)
	}
	if len(req.Query) > api.MaxQuery {
		return nil, 0, fmt.Errorf("%w: query over %d bytes", ErrInvalid, api.MaxQuery)
	}
	ts := terms(req.Query)
	if len(ts) == 0 {
		return nil, 0, fmt.Errorf("%w: the query has no words (letters or digits) to look for", ErrInvalid)
	}
	if len(ts) > maxQueryTerms {
		return nil, 0, fmt.Errorf("%w: query of %d words; at most %d", ErrInvalid, len(ts), maxQueryTerms)
	}
	limit, err := pageSize(req.Limit)
	return ts, limit, err
}

// pageSize checks a requested page size: 0 is api.DefaultPage.
func pageSize(n int) (int, error) {
	switch {
	case n == 0:
		return api.DefaultPage, nil
	case n < 0 || n > api.MaxPage:
		return 0, fmt.Errorf("%w: limit %d (1 to %d)", ErrInvalid, n, api.MaxPage)
	}
	return n, nil
}

// postings is one sorted list of message ids: the keys k ‖ 0x00 ‖ id of a bucket.
type postings struct {
	c      *bbolt.Cursor
	prefix []byte
}

func newPostings(b *bbolt.Bucket, k string) *postings {
	return &postings{c: b.Cursor(), prefix: prefix(k)}
}

// seekLE returns the greatest id in the list that is ≤ id (< id when strict), and false when
// there is none.
func (l *postings) seekLE(id []byte, strict bool) ([]byte, bool) {
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

// intersectDesc calls visit with each id that is in every list, greatest first, until visit
// returns false or a list runs out (a leapfrog join: each list in turn seeks to the current
// candidate; a list that holds it agrees, one that does not lowers the candidate).
func intersectDesc(lists []*postings, visit func(id []byte) bool) {
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

// viewTx is message id as agent sees it: its copy, or "sent" for mail it sent and holds no copy
// of. With no agent (the host's view) the state is "sent" or "received".
func (h *Host) viewTx(tx *bbolt.Tx, agent, id string) (api.Message, error) {
	var m storedMessage
	found, err := getJSON(tx.Bucket(bucketMessages), []byte(id), &m)
	if err != nil {
		return api.Message{}, err
	}
	if !found {
		return api.Message{}, fmt.Errorf("%w: index names a missing message %s", ErrCorrupt, id)
	}
	if agent != "" {
		var e mboxEntry
		if found, err := getJSON(tx.Bucket(bucketMbox), key2(agent, id), &e); err != nil || found {
			return m.api(agent, e), err
		}
	}
	v := m.api(agent, mboxEntry{})
	v.State = "received"
	if tx.Bucket(bucketSent).Get([]byte(id)) != nil {
		v.State = "sent"
	}
	return v, nil
}

// viewsTx is viewTx of each id, in order.
func (h *Host) viewsTx(tx *bbolt.Tx, agent string, ids []string) ([]api.Message, error) {
	out := make([]api.Message, 0, len(ids))
	for _, id := range ids {
		m, err := h.viewTx(tx, agent, id)
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, nil
}

// visibleTx reports whether agent holds or sent message id ("" sees everything).
func visibleTx(tx *bbolt.Tx, agent, id string) bool {
	return agent == "" || tx.Bucket(bucketIdxAgent).Get(key2(agent, id)) != nil
}

// validRef is a message or thread id as a request may name it: not empty, at most 1 KiB (a
// thread id is at most 300 UTF-16 units), no NUL.
func validRef(id string) bool {
	return id != "" && len(id) <= 1024 && !strings.ContainsRune(id, 0)
}
