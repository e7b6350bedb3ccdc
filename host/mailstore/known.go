package mailstore

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"

	"go.etcd.io/bbolt"

	"github.com/agentmbx/agentmbx/api"
)

// KnownAgents lists the agents of paired hosts that this host knows of: it had mail or a delivery
// receipt from them, or sent mail to them by name@host. Hosts no longer paired are left out.
// Sorted by host, then name.
func (s *Store) KnownAgents(ctx context.Context) ([]api.KnownAgent, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out := []api.KnownAgent{}
	err := s.db.View(func(tx *bbolt.Tx) error {
		peers, err := s.host.PeersTx(tx)
		if err != nil {
			return err
		}
		c := tx.Bucket(bucketKnown).Cursor()
		for _, p := range peers {
			pre := prefix(p)
			for k, _ := c.Seek(pre); k != nil && bytes.HasPrefix(k, pre); k, _ = c.Next() {
				name := string(k[len(pre):])
				out = append(out, api.KnownAgent{Host: p, Name: name, Address: name + "@" + p})
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("host: known agents: %w", err)
	}
	slices.SortFunc(out, func(a, b api.KnownAgent) int {
		if c := strings.Compare(a.Host, b.Host); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out, nil
}
