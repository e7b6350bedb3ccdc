package testkit

import "github.com/agentmbx/agentmbx/api"

// MessageIDs lists the ids of ms in order, for comparing pages of mail in tests.
func MessageIDs(ms []api.Message) []string {
	return pluck(ms, func(m api.Message) string { return m.ID })
}

// MessageStates lists the states of ms in order.
func MessageStates(ms []api.Message) []string {
	return pluck(ms, func(m api.Message) string { return m.State })
}

func pluck(ms []api.Message, f func(api.Message) string) []string {
	var out []string
	for _, m := range ms {
		out = append(out, f(m))
	}
	return out
}
