// Package agents is the host's register of local agents: one bucket of the host's bbolt file
// (Bucket: name → Record JSON), read and written inside the caller's transactions, so that an
// agent registered on first use commits with the mail that made it. Two names are not agents:
// MBX, the sender of the host's own mail (alerts), which no one may send as or register, and
// Owner, the mailbox of the host's owner, which is never registered (so * and roles leave it out).
package agents

import (
	"fmt"
	"time"

	"go.etcd.io/bbolt"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/host/internal/boltjson"
	"github.com/agentmbx/agentmbx/mbx"
)

// Reserved agent names.
const (
	// MBX is the pseudo-sender of the host's own mail (alerts). No agent may send as it.
	MBX = "mbx"
	// Owner is the pseudo-agent of the host's owner: the address "owner" delivers to it.
	Owner = "owner"
)

// Bucket is the name of the agents bucket in the host's store; the host creates it.
var Bucket = []byte("agents")

// Record is an agent as stored.
type Record struct {
	Name    string `json:"name"`
	Role    string `json:"role,omitempty"`
	AddedAt string `json:"added_at"`
	// CreatedBy is set when mail from another host created the agent (the sender's address):
	// nobody here registered that name, so it may be a typo. Add clears it.
	CreatedBy string `json:"created_by,omitempty"`
}

// CheckName refuses MBX (api.ErrReserved) and what is not an agent name (api.ErrInvalid).
func CheckName(name string) error {
	if name == MBX {
		return fmt.Errorf("%w: %q is the host's own sender", api.ErrReserved, name)
	}
	if !mbx.ValidAgentName(name) {
		return fmt.Errorf("%w: agent name %q (a-z, 0-9 and -, 2 to 40 characters)", api.ErrInvalid, name)
	}
	return nil
}

// Ensure registers name on first use; an existing agent is left as it is, and Owner is never
// registered. createdBy, for mail from another host, is its sender: the agent then exists
// because of it.
func Ensure(tx *bbolt.Tx, name string, now time.Time, createdBy string) error {
	if name == Owner {
		return nil
	}
	b := tx.Bucket(Bucket)
	if b.Get([]byte(name)) != nil {
		return nil
	}
	return boltjson.Put(b, []byte(name), Record{Name: name, AddedAt: mbx.ISOTime(now), CreatedBy: createdBy})
}

// List lists the agents in name order.
func List(tx *bbolt.Tx) ([]Record, error) {
	return boltjson.All[Record](tx.Bucket(Bucket))
}

// Add registers a, or sets the role of the registered agent (an empty role leaves it as it
// is); an agent that incoming mail created is adopted (its CreatedBy is cleared). Names and
// roles are checked first: api.ErrReserved for MBX and Owner, api.ErrInvalid for the rest.
func Add(tx *bbolt.Tx, a api.Agent, now time.Time) (Record, error) {
	if err := CheckName(a.Name); err != nil {
		return Record{}, err
	}
	if a.Name == Owner {
		return Record{}, fmt.Errorf("%w: %q is the owner's mailbox, not an agent", api.ErrReserved, a.Name)
	}
	if a.Role != "" && !mbx.ValidAgentName(a.Role) { // roles follow the agent name rule
		return Record{}, fmt.Errorf("%w: role %q (a-z, 0-9 and -, 2 to 40 characters)", api.ErrInvalid, a.Role)
	}
	b := tx.Bucket(Bucket)
	var out Record
	found, err := boltjson.Get(b, []byte(a.Name), &out)
	if err != nil {
		return Record{}, err
	}
	if !found {
		out = Record{Name: a.Name, AddedAt: mbx.ISOTime(now)}
	}
	if a.Role != "" {
		out.Role = a.Role
	}
	out.CreatedBy = ""
	return out, boltjson.Put(b, []byte(out.Name), out)
}
