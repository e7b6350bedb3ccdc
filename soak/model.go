package soak

import (
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/agentmbx/agentmbx/internal/oracle"
)

// Agent is an agent of a host, with its role ("" for none).
type Agent struct{ Name, Role string }

// Host is a host of the soak and its agents.
type Host struct {
	Name   string
	Agents []Agent
}

// Role is the role every host has one agent of, so that role mail reaches every host.
const Role = "reviewer"

// Shared is the agent name every host has, so that a bare name reaches every host.
const Shared = "ops"

// Topology is the soak's hosts: on host hN, revN (the Role), devN, and Shared. Senders are
// revN and devN, never Shared (a bare name would then include the sender itself).
func Topology(n int) []Host {
	hosts := make([]Host, n)
	for i := range hosts {
		hosts[i] = Host{Name: fmt.Sprintf("h%d", i+1), Agents: []Agent{
			{Name: fmt.Sprintf("rev%d", i+1), Role: Role},
			{Name: fmt.Sprintf("dev%d", i+1)},
			{Name: Shared},
		}}
	}
	return hosts
}

// Pick draws one message: a sender (host index, agent) and an address, one in four of each
// kind: name@host on another host, name@host on the same host, '*', role:Role or Shared.
func Pick(rng *rand.Rand, hosts []Host) (from int, agent, to string) {
	from = rng.IntN(len(hosts))
	agent = hosts[from].Agents[rng.IntN(2)].Name
	switch rng.IntN(8) {
	case 0:
		to = "*"
	case 1:
		to = "role:" + Role
	case 2:
		to = Shared
	case 3:
		a := hosts[from].Agents[rng.IntN(len(hosts[from].Agents))]
		for a.Name == agent {
			a = hosts[from].Agents[rng.IntN(len(hosts[from].Agents))]
		}
		to = a.Name + "@" + hosts[from].Name
	default:
		h := (from + 1 + rng.IntN(len(hosts)-1)) % len(hosts)
		to = hosts[h].Agents[rng.IntN(len(hosts[h].Agents))].Name + "@" + hosts[h].Name
	}
	return from, agent, to
}

// Recipients is where a message from agent on host from to address to must arrive, as
// agentmbx resolves addresses: name@host is that mailbox; a bare name is that agent on every
// host; role:R every agent with role R but the sender; '*' every agent but the sender.
func Recipients(hosts []Host, from, agent, to string) []oracle.Mailbox {
	var out []oracle.Mailbox
	for _, h := range hosts {
		for _, a := range h.Agents {
			m := oracle.Mailbox{Host: h.Name, Agent: a.Name}
			self := h.Name == from && a.Name == agent
			var hit bool
			switch {
			case to == "*":
				hit = !self
			case len(to) > 5 && to[:5] == "role:":
				hit = a.Role == to[5:] && !self
			default:
				hit = to == a.Name || to == m.String()
			}
			if hit {
				out = append(out, m)
			}
		}
	}
	slices.SortFunc(out, func(a, b oracle.Mailbox) int {
		if a.Host != b.Host {
			return cmpStr(a.Host, b.Host)
		}
		return cmpStr(a.Agent, b.Agent)
	})
	return out
}

func cmpStr(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
