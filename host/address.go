package host

import (
	"fmt"
	"strings"
)

// The address forms of protocol.md, read for routing. (mbx will carry the wire-level parser; this
// is the host's own reading, which needs only the form and its parts.)
type addrKind int

const (
	addrAgent addrKind = iota + 1 // name@host
	addrBare                      // name
	addrRole                      // role:<role>
	addrAll                       // *
	addrOwner                     // owner (this host's owner)
)

type address struct {
	kind addrKind
	name string // agent name, or the role
	host string // addrAgent only
}

// parseAddress reads one address. Agent names and roles follow the agent name rule, hosts the
// host name rule; "owner@host" names a host's owner.
func parseAddress(s string) (address, error) {
	switch {
	case s == "*":
		return address{kind: addrAll}, nil
	case s == AgentOwner:
		return address{kind: addrOwner, name: AgentOwner}, nil
	case strings.HasPrefix(s, "role:"):
		r := strings.TrimPrefix(s, "role:")
		if !validRole(r) {
			return address{}, fmt.Errorf("%w: role %q in address %q", ErrInvalid, r, s)
		}
		return address{kind: addrRole, name: r}, nil
	}
	name, host, ok := strings.Cut(s, "@")
	if !ValidAgentName(name) {
		return address{}, fmt.Errorf("%w: address %q (name@host, name, role:ROLE, * or owner)", ErrInvalid, s)
	}
	if !ok {
		return address{kind: addrBare, name: name}, nil
	}
	if !ValidHostName(host) {
		return address{}, fmt.Errorf("%w: host %q in address %q", ErrInvalid, host, s)
	}
	return address{kind: addrAgent, name: name, host: host}, nil
}
