package mailstore

import (
	"context"
	"fmt"
	"strings"

	"go.etcd.io/bbolt"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/mbx"
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
func (s *Store) Search(ctx context.Context, req api.SearchRequest) (api.SearchResult, error) {
	if err := ctx.Err(); err != nil {
		return api.SearchResult{}, err
	}
	ts, limit, err := checkSearch(req)
	if err != nil {
		return api.SearchResult{}, fmt.Errorf("host: search: %w", err)
	}
	out := api.SearchResult{Query: req.Query}
	err = s.db.View(func(tx *bbolt.Tx) error {
		lists := make([]*postings, 0, len(ts)+1)
		for _, t := range ts {
			lists = append(lists, newPostings(tx.Bucket(bucketTerms), t))
		}
		if req.Agent != "" {
			lists = append(lists, newPostings(tx.Bucket(bucketAgent), req.Agent))
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
		out.Messages, err = s.viewsTx(tx, req.Agent, ids)
		return err
	})
	if err != nil {
		return api.SearchResult{}, fmt.Errorf("host: search: %w", err)
	}
	return out, nil
}

// checkSearch validates a search request and returns its words and page size.
func checkSearch(req api.SearchRequest) ([]string, int, error) {
	if req.Agent != "" && !mbx.ValidAgentName(req.Agent) {
		return nil, 0, fmt.Errorf("%w: agent name %q", api.ErrInvalid, req.Agent)
	}
	if len(req.Query) > api.MaxQuery {
		return nil, 0, fmt.Errorf("%w: query over %d bytes", api.ErrInvalid, api.MaxQuery)
	}
	ts := words(req.Query)
	if len(ts) == 0 {
		return nil, 0, fmt.Errorf("%w: the query has no words (letters or digits) to look for", api.ErrInvalid)
	}
	if len(ts) > maxQueryTerms {
		return nil, 0, fmt.Errorf("%w: query of %d words; at most %d", api.ErrInvalid, len(ts), maxQueryTerms)
	}
	limit, err := api.PageSize(req.Limit)
	return ts, limit, err
}

// viewTx is message id as agent sees it: its copy, or "sent" for mail it sent and holds no copy
// of. With no agent (the host's view) the state is "sent" or "received".
func (s *Store) viewTx(tx *bbolt.Tx, agent, id string) (api.Message, error) {
	m, found, err := MessageTx(tx, id)
	if err != nil {
		return api.Message{}, err
	}
	if !found {
		return api.Message{}, fmt.Errorf("%w: index names a missing message %s", api.ErrCorrupt, id)
	}
	if agent != "" {
		if e, found, err := CopyTx(tx, agent, id); err != nil || found {
			return m.apiTx(tx, agent, e), err
		}
	}
	v := m.api(agent, Copy{})
	v.State = "received"
	if s.host.SentTx(tx, id) {
		v.State = "sent"
	}
	return v, nil
}

// viewsTx is viewTx of each id, in order.
func (s *Store) viewsTx(tx *bbolt.Tx, agent string, ids []string) ([]api.Message, error) {
	out := make([]api.Message, 0, len(ids))
	for _, id := range ids {
		m, err := s.viewTx(tx, agent, id)
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, nil
}

// visibleTx reports whether agent holds or sent message id ("" sees everything).
func visibleTx(tx *bbolt.Tx, agent, id string) bool {
	return agent == "" || tx.Bucket(bucketAgent).Get(key(agent, id)) != nil
}

// validRef is a message or thread id as a request may name it: not empty, at most 1 KiB (a
// thread id is at most 300 UTF-16 units), no NUL.
func validRef(id string) bool {
	return id != "" && len(id) <= 1024 && !strings.ContainsRune(id, 0)
}
