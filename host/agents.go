package host

import (
	"context"
	"fmt"
	"regexp"
	"time"

	"go.etcd.io/bbolt"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/host/mailstore"
	"github.com/agentmbx/agentmbx/mbx"
)

// Reserved agent names.
const (
	// AgentMBX is the pseudo-sender of the host's own mail (alerts). No agent may send as it.
	AgentMBX = mailstore.AgentMBX
	// AgentOwner is the pseudo-agent of the host's owner: the address "owner" delivers to it.
	AgentOwner = "owner"
)

var agentRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{1,39}$`)

// ValidAgentName reports whether s is an agent name: lower-case letters, digits and '-', 2 to 40
// characters, not starting with '-'.
func ValidAgentName(s string) bool { return agentRE.MatchString(s) }

// validRole: roles follow the agent name rule.
func validRole(s string) bool { return agentRE.MatchString(s) }

// agentRecord is an agents bucket value.
type agentRecord struct {
	Name    string `json:"name"`
	Role    string `json:"role,omitempty"`
	AddedAt string `json:"added_at"`
	// CreatedBy is set when mail from another host created the agent (the sender's address):
	// nobody here registered that name, so it may be a typo. agents add clears it.
	CreatedBy string `json:"created_by,omitempty"`
}

func checkAgentName(name string) error {
	if name == AgentMBX {
		return fmt.Errorf("%w: %q is the host's own sender", ErrReserved, name)
	}
	if !ValidAgentName(name) {
		return fmt.Errorf("%w: agent name %q (a-z, 0-9 and -, 2 to 40 characters)", ErrInvalid, name)
	}
	return nil
}

// ensureAgentTx registers name on first use; an existing agent is left as it is. The owner is a
// pseudo-agent: it has a mailbox but is never registered (so * and roles never include it).
// createdBy, for mail from another host, is its sender: the agent then exists because of it.
func ensureAgentTx(tx *bbolt.Tx, name string, now time.Time, createdBy string) error {
	if name == AgentOwner {
		return nil
	}
	b := tx.Bucket(bucketAgents)
	if b.Get([]byte(name)) != nil {
		return nil
	}
	return putJSON(b, []byte(name), agentRecord{Name: name, AddedAt: mbx.ISOTime(now), CreatedBy: createdBy})
}

func agentsTx(tx *bbolt.Tx) ([]agentRecord, error) {
	var out []agentRecord
	b := tx.Bucket(bucketAgents)
	err := b.ForEach(func(k, _ []byte) error {
		var a agentRecord
		if _, err := getJSON(b, k, &a); err != nil {
			return err
		}
		out = append(out, a)
		return nil
	})
	return out, err
}

// Agents lists the local agents in name order.
func (h *Host) Agents(ctx context.Context) ([]api.Agent, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var out []api.Agent
	err := h.db.View(func(tx *bbolt.Tx) error {
		as, err := agentsTx(tx)
		for _, a := range as {
			out = append(out, api.Agent{Name: a.Name, Role: a.Role, CreatedByMail: a.CreatedBy})
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("host: agents: %w", err)
	}
	if out == nil {
		out = []api.Agent{}
	}
	return out, nil
}

// AddAgent registers an agent, or sets the role of an existing one (an empty role leaves the
// role as it is). It is idempotent. An agent that incoming mail created is adopted: its
// created-by-mail mark is cleared.
func (h *Host) AddAgent(ctx context.Context, a api.Agent) (api.Agent, error) {
	if err := ctx.Err(); err != nil {
		return api.Agent{}, err
	}
	if err := checkAgentName(a.Name); err != nil {
		return api.Agent{}, fmt.Errorf("host: add agent: %w", err)
	}
	if a.Name == AgentOwner {
		return api.Agent{}, fmt.Errorf("host: add agent: %w: %q is the owner's mailbox, not an agent", ErrReserved, a.Name)
	}
	if a.Role != "" && !validRole(a.Role) {
		return api.Agent{}, fmt.Errorf("host: add agent: %w: role %q (a-z, 0-9 and -, 2 to 40 characters)", ErrInvalid, a.Role)
	}
	var out agentRecord
	err := h.db.Update(func(tx *bbolt.Tx) error {
		b := tx.Bucket(bucketAgents)
		found, err := getJSON(b, []byte(a.Name), &out)
		if err != nil {
			return err
		}
		if !found {
			out = agentRecord{Name: a.Name, AddedAt: mbx.ISOTime(h.clock())}
		}
		if a.Role != "" {
			out.Role = a.Role
		}
		out.CreatedBy = ""
		return putJSON(b, []byte(a.Name), out)
	})
	if err != nil {
		return api.Agent{}, fmt.Errorf("host: add agent: %w", err)
	}
	return api.Agent{Name: out.Name, Role: out.Role}, nil
}
