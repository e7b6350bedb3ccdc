package host

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/internal/version"
)

// daemonRun is what RunDaemon records while it runs: when it started, how to stop it and how to
// ask it for a key rotation.
type daemonRun struct {
	started time.Time
	stop    context.CancelFunc
	rotate  chan rotateRequest
}

// rotateRequest asks RunDaemon for a key rotation; it answers on reply (buffered).
type rotateRequest struct{ reply chan rotateAnswer }

type rotateAnswer struct {
	rotation *api.Rotation
	err      error
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

// RotateKeys rotates this host's keys while the daemon runs (api.DaemonService; `agentmbx id
// rotate`). The daemon stops its loops, lets the requests in flight finish (new ones wait),
// closes the store, makes the new keys and swaps them (PrepareRotation, as `id rotate` does
// without a daemon), opens the store again and goes on serving with the new keys; its rotation
// loop then tells the peers and the relay. It answers with the rotation's progress once the
// daemon serves with the new keys.
func (h *Host) RotateKeys(ctx context.Context) (*api.Rotation, error) {
	h.mu.Lock()
	run := h.run
	h.mu.Unlock()
	if run == nil {
		return nil, errNotDaemon
	}
	// This request waits for the rotation: it must not count among those the rotation waits for.
	detachRequest(ctx)
	req := rotateRequest{reply: make(chan rotateAnswer, 1)}
	select {
	case run.rotate <- req:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	a := <-req.reply // the rotation runs to its end whatever the caller does
	if a.err != nil {
		return nil, fmt.Errorf("host: rotate: %w", a.err)
	}
	return a.rotation, nil
}
