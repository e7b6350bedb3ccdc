package relaylink

import (
	"errors"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/relayclient"
)

// ProblemKind says what kind of relay problem err is: api.RelayRefused when the relay answered
// and refused (a 4xx other than 429, or an answer that does not confirm: the same request will
// not succeed), else api.RelayTransient (the relay unreachable or busy, a broken answer, a local
// failure such as an unreadable token file: retrying, or the owner fixing this host, may help).
func ProblemKind(err error) string {
	if errors.Is(err, relayclient.ErrRefused) && !errors.Is(err, relayclient.ErrRateLimited) {
		return api.RelayRefused
	}
	return api.RelayTransient
}

// problemKey is what tells a recorded problem from a new one: its kind and its words ("" for
// none).
func problemKey(p api.RelayProblem) string {
	if p.Error == "" {
		return ""
	}
	return p.Kind + ":" + p.Error
}
