package host

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"

	"go.etcd.io/bbolt"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/host/mailindex"
)

// KnownAgents lists the agents of paired hosts that this host knows of: it had mail or a delivery
// receipt from them, or sent mail to them by name@host. Hosts no longer paired are left out.
// Sorted by host, then name.
func (h *Host) KnownAgents(ctx context.Context) ([]api.KnownAgent, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out := []api.KnownAgent{}
	err := h.db.View(func(tx *bbolt.Tx) error {
		peers, err := peersTx(tx)
		if err != nil {
			return err
		}
		c := tx.Bucket(mailindex.Known).Cursor()
		for _, p := range peers {
			pre := prefix(p.Host)
			for k, _ := c.Seek(pre); k != nil && bytes.HasPrefix(k, pre); k, _ = c.Next() {
				name := string(k[len(pre):])
				out = append(out, api.KnownAgent{Host: p.Host, Name: name, Address: name + "@" + p.Host})
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
