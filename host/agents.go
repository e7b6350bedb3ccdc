package host

import (
	"context"
	"fmt"
	"time"

	"go.etcd.io/bbolt"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/host/agents"
)

// Reserved agent names (package host/agents).
const (
	// AgentMBX is the pseudo-sender of the host's own mail (alerts). No agent may send as it.
	AgentMBX = agents.MBX
	// AgentOwner is the pseudo-agent of the host's owner: the address "owner" delivers to it.
	AgentOwner = agents.Owner
)

// agentRecord is an agent as stored (package host/agents).
type agentRecord = agents.Record

func checkAgentName(name string) error { return agents.CheckName(name) }

// ensureAgentTx registers name on first use (agents.Ensure).
func ensureAgentTx(tx *bbolt.Tx, name string, now time.Time, createdBy string) error {
	return agents.Ensure(tx, name, now, createdBy)
}

func agentsTx(tx *bbolt.Tx) ([]agentRecord, error) { return agents.List(tx) }

// Agents lists the local agents in name order.
func (h *Host) Agents(ctx context.Context) ([]api.Agent, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out := []api.Agent{}
	err := h.db.View(func(tx *bbolt.Tx) error {
		as, err := agents.List(tx)
		for _, a := range as {
			out = append(out, api.Agent{Name: a.Name, Role: a.Role, CreatedByMail: a.CreatedBy})
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("host: agents: %w", err)
	}
	return out, nil
}

// AddAgent registers an agent, or sets the role of an existing one (agents.Add). It is
// idempotent. An agent that incoming mail created is adopted: its created-by-mail mark is
// cleared.
func (h *Host) AddAgent(ctx context.Context, a api.Agent) (api.Agent, error) {
	if err := ctx.Err(); err != nil {
		return api.Agent{}, err
	}
	var out agentRecord
	err := h.db.Update(func(tx *bbolt.Tx) error {
		var err error
		out, err = agents.Add(tx, a, h.clock())
		return err
	})
	if err != nil {
		return api.Agent{}, fmt.Errorf("host: add agent: %w", err)
	}
	return api.Agent{Name: out.Name, Role: out.Role}, nil
}
