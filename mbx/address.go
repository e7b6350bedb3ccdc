package mbx

import (
	"fmt"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// AddressKind says which form an address has.
type AddressKind int

// The address forms of the protocol.
const (
	AddrAgent     AddressKind = iota + 1 // name@host: one agent on one host
	AddrName                             // name: an agent found by name (this host first)
	AddrRole                             // role:<role>: the live agents with that role, here and on every paired host
	AddrBroadcast                        // *: every live agent, here and on every paired host
	AddrOwner                            // owner: this host's owner
)

func (k AddressKind) String() string {
	switch k {
	case AddrAgent:
		return "agent"
	case AddrName:
		return "name"
	case AddrRole:
		return "role"
	case AddrBroadcast:
		return "broadcast"
	case AddrOwner:
		return "owner"
	}
	return fmt.Sprintf("AddressKind(%d)", int(k))
}

// Address is one recipient of an envelope's to list. Name is set for AddrAgent and AddrName, Host
// for AddrAgent, Role for AddrRole.
type Address struct {
	Kind AddressKind
	Name string
	Host string
	Role string
}

// The spellings of names. Agent names are lowercase; host names may carry capitals, dots and
// underscores; roles are free labels of up to 40 characters.
var (
	hostRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)
	roleRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,39}$`)
)

// ValidAgentName reports whether s is an agent name: ^[a-z0-9][a-z0-9-]{1,39}$.
func ValidAgentName(s string) bool { return nameRE.MatchString(s) }

// ValidHostName reports whether s is a host name: ^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$.
func ValidHostName(s string) bool { return hostRE.MatchString(s) }

// The literal addresses.
const (
	broadcastAddr = "*"
	ownerAddr     = "owner"
	rolePrefix    = "role:"
)

// ParseAddress reads one address: "name@host", a bare "name", "role:<role>", "*" or "owner".
// It is strict: no spaces, no case folding, exactly one '@'; anything else is ErrBadAddress with
// what is wrong. "owner@host" is the agent address of that host's owner mailbox.
func ParseAddress(s string) (Address, error) {
	bad := func(why string) (Address, error) {
		return Address{}, fmt.Errorf("%w %q: %s", ErrBadAddress, s, why)
	}
	switch {
	case s == "":
		return bad("empty")
	case s == broadcastAddr:
		return Address{Kind: AddrBroadcast}, nil
	case s == ownerAddr:
		return Address{Kind: AddrOwner}, nil
	case strings.HasPrefix(s, rolePrefix):
		role := s[len(rolePrefix):]
		if !roleRE.MatchString(role) {
			return bad("a role is 1-40 characters of letters, digits, '.', '_' and '-', starting with a letter or digit")
		}
		return Address{Kind: AddrRole, Role: role}, nil
	}
	name, host, hasHost := strings.Cut(s, "@")
	if !nameRE.MatchString(name) {
		return bad("an agent name is 2-40 characters of a-z, 0-9 and '-', starting with a letter or digit")
	}
	if !hasHost {
		return Address{Kind: AddrName, Name: name}, nil
	}
	if !hostRE.MatchString(host) {
		return bad("a host name is 1-63 characters of letters, digits, '.', '_' and '-', starting with a letter or digit")
	}
	return Address{Kind: AddrAgent, Name: name, Host: host}, nil
}

// String prints the address as ParseAddress reads it.
func (a Address) String() string {
	switch a.Kind {
	case AddrAgent:
		return a.Name + "@" + a.Host
	case AddrName:
		return a.Name
	case AddrRole:
		return rolePrefix + a.Role
	case AddrBroadcast:
		return broadcastAddr
	case AddrOwner:
		return ownerAddr
	}
	return ""
}

// IsZero reports whether a is the zero Address (no address).
func (a Address) IsZero() bool { return a == Address{} }

// MarshalText is String; the zero Address and an Address that ParseAddress would refuse are errors.
func (a Address) MarshalText() ([]byte, error) {
	s := a.String()
	if p, err := ParseAddress(s); err != nil || p != a {
		return nil, fmt.Errorf("%w: %+v is not a well-formed address", ErrBadAddress, a)
	}
	return []byte(s), nil
}

// UnmarshalText is ParseAddress.
func (a *Address) UnmarshalText(b []byte) error {
	p, err := ParseAddress(string(b))
	if err != nil {
		return err
	}
	*a = p
	return nil
}

// ---- routing ----------------------------------------------------------------------------------

// Directory is what routing needs to know of this host and its peers. Implementations answer
// from their own state; routing itself is pure.
type Directory interface {
	// LocalHost is this host's name.
	LocalHost() string
	// LocalAgent reports whether name is an agent registered on this host.
	LocalAgent(name string) bool
	// LiveAgents are the local agents a broadcast reaches.
	LiveAgents() []string
	// RoleAgents are the live local agents that have role.
	RoleAgents(role string) []string
	// PairedHosts are the approved peer hosts.
	PairedHosts() []string
	// AgentHosts are the paired hosts known to have an agent called name.
	AgentHosts(name string) []string
}

// Routes is where one envelope goes: local mailboxes and the peer hosts that need a copy (one
// outbox row per message per host). Warnings tell the sender about recipients that went somewhere
// other than it may think, or nowhere.
type Routes struct {
	Local    []string // agent names of this host, and "owner"
	Remote   []string // paired host names
	Warnings []string
}

// ExpandRecipients resolves a sender's to list before any transport: broadcasts and roles reach
// the matching live local agents and every paired host (each host expands them for its own
// agents); name@host goes to that host when it is paired; a bare name is a local agent when there
// is one, else the one paired host known to have it, else (with a warning) this host's inbox for
// that name. Each local name and remote host appears once, in the order first reached.
func ExpandRecipients(to []string, dir Directory) Routes {
	return route(to, dir, false)
}

// LocalRecipients resolves the to list of an envelope received from a peer to this host's
// mailboxes: broadcasts and roles reach the matching live local agents, name@<this host> and bare
// names reach that name, and addresses of other hosts are not this host's to deliver.
func LocalRecipients(to []string, dir Directory) []string {
	return route(to, dir, true).Local
}

func route(to []string, dir Directory, receiving bool) Routes {
	var r Routes
	local := func(names ...string) {
		for _, n := range names {
			if !slices.Contains(r.Local, n) {
				r.Local = append(r.Local, n)
			}
		}
	}
	remote := func(hosts ...string) {
		for _, h := range hosts {
			if !slices.Contains(r.Remote, h) {
				r.Remote = append(r.Remote, h)
			}
		}
	}
	self := dir.LocalHost()
	var paired []string
	if !receiving {
		paired = dir.PairedHosts()
	}
	for _, t := range to {
		a, err := ParseAddress(t)
		if err != nil {
			r.Warnings = append(r.Warnings, err.Error())
			continue
		}
		switch a.Kind {
		case AddrBroadcast:
			local(dir.LiveAgents()...)
			remote(paired...)
		case AddrRole:
			local(dir.RoleAgents(a.Role)...)
			remote(paired...)
		case AddrOwner:
			local(ownerAddr)
		case AddrAgent:
			switch {
			case a.Host == self:
				local(a.Name)
			case receiving:
			case slices.Contains(paired, a.Host):
				remote(a.Host)
			default:
				r.Warnings = append(r.Warnings, fmt.Sprintf("%s: host %s is not paired", t, a.Host))
			}
		case AddrName:
			if receiving || dir.LocalAgent(a.Name) {
				local(a.Name)
				continue
			}
			var hosts []string
			for _, h := range dir.AgentHosts(a.Name) {
				if h != self && slices.Contains(paired, h) && !slices.Contains(hosts, h) {
					hosts = append(hosts, h)
				}
			}
			switch len(hosts) {
			case 1:
				remote(hosts[0])
			case 0:
				local(a.Name)
				r.Warnings = append(r.Warnings, fmt.Sprintf("%s is not a known agent; delivered to this host's inbox for %s", a.Name, a.Name))
			default:
				r.Warnings = append(r.Warnings, fmt.Sprintf("%s exists on %s; address it as %s@<host>", a.Name, strings.Join(hosts, ", "), a.Name))
			}
		}
	}
	return r
}

// MaxDialAddrLen caps a LAN address in a card or a pairing message.
const MaxDialAddrLen = 300

// CheckDialAddr checks a LAN address a peer can dial: host:port with a non-empty host (a name or
// an IP address) and a port from 1 to 65535.
func CheckDialAddr(s string) error {
	if len(s) > MaxDialAddrLen {
		return fmt.Errorf("address longer than %d characters", MaxDialAddrLen)
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("address %q: want host:port", clipText(s))
	}
	if host == "" || strings.ContainsFunc(host, func(r rune) bool { return r <= ' ' || r == 0x7f || r == '/' }) {
		return fmt.Errorf("address %q: bad host", clipText(s))
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 || port != strconv.Itoa(n) {
		return fmt.Errorf("address %q: bad port", clipText(s))
	}
	return nil
}

// clipText shortens outside input for an error message.
func clipText(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
