package relaylink

import (
	"errors"
	"net/http"

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

// NoAnswer reports whether err means the relay did not answer at all: no HTTP answer, or a
// gateway in front of it (TLS at the edge) saying the service behind is gone (502, 504, a 503
// without Retry-After; a 503 with one is the relay asking to slow down). The host then counts
// the relay down and probes it until it answers.
func NoAnswer(err error) bool {
	if errors.Is(err, relayclient.ErrTransport) {
		return true
	}
	var se *relayclient.StatusError
	if !errors.As(err, &se) {
		return false
	}
	switch se.Status {
	case http.StatusBadGateway, http.StatusGatewayTimeout:
		return true
	case http.StatusServiceUnavailable:
		return se.RetryAfter == 0
	}
	return false
}
