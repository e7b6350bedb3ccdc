package host

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/internal/version"
)

// daemonRun is what RunDaemon records while it runs: when it started and how to stop it.
type daemonRun struct {
	started time.Time
	stop    context.CancelFunc
}

// errNotDaemon answers the daemon routes of a host whose daemon is not running here.
var errNotDaemon = api.NewError(api.CodeNotFound, "no daemon runs in this process",
	"start one with `agentmbx daemon`")

// DaemonStatus describes the running daemon (api.DaemonService): its process and uptime, its
// LAN listener, the relay link's state and the outbox rows by state.
func (h *Host) DaemonStatus(ctx context.Context) (api.DaemonStatus, error) {
	h.mu.Lock()
	run, listen := h.run, h.listen
	h.mu.Unlock()
	if run == nil {
		return api.DaemonStatus{}, errNotDaemon
	}
	now := h.clock()
	st := api.DaemonStatus{Running: true, PID: os.Getpid(), StartedAt: isoOrEmpty(run.started),
		UptimeS: int64(max(now.Sub(run.started), 0) / time.Second), Version: version.String(),
		Host: h.name, Home: h.dir, LAN: "off", Listen: listen}
	bound, _, bindErr := h.lanBound()
	switch {
	case bound != "":
		st.LAN, st.Listen = "listening", bound
	case bindErr != "":
		st.LAN, st.LANError = "retrying", bindErr
	}
	snap, err := h.ops.Snapshot(ctx)
	if err != nil {
		return api.DaemonStatus{}, fmt.Errorf("host: daemon status: %w", err)
	}
	st.Relay, st.RelayProblems, st.Outbox = snap.RelayLink, snap.RelayProblems, snap.Outbox
	if st.LANAlerts, err = h.lanAlerts(); err != nil {
		return api.DaemonStatus{}, fmt.Errorf("host: daemon status: %w", err)
	}
	st.Reach = h.reachStatus()
	if st.Relay != "none" {
		rs, err := h.relay.RelayStatus(ctx)
		if err != nil {
			return api.DaemonStatus{}, fmt.Errorf("host: daemon status: %w", err)
		}
		st.RelayURL = rs.URL
	}
	return st, nil
}

// StopDaemon begins the daemon's graceful stop (as SIGTERM does) and answers with its status as
// the stop began.
func (h *Host) StopDaemon(ctx context.Context) (api.DaemonStatus, error) {
	st, err := h.DaemonStatus(ctx)
	if err != nil {
		return st, err
	}
	h.mu.Lock()
	run := h.run
	h.mu.Unlock()
	if run != nil {
		h.log.Info("daemon stop requested over the control socket")
		run.stop()
	}
	return st, nil
}
