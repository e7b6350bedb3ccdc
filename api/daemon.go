package api

import "context"

// The daemon routes of the control socket, served when the service also implements
// DaemonService (only a running daemon does):
//
//	GET  /v1/daemon        → DaemonStatus
//	POST /v1/daemon/stop   → DaemonStatus (as it was when the stop began)
//	POST /v1/daemon/rotate → Rotation (once the daemon serves with the new keys)

// DaemonService is what a running daemon says about itself and how it is stopped. The host
// implements it while it runs as a daemon; client.Client over the control socket.
type DaemonService interface {
	// DaemonStatus describes the running daemon: its process, uptime, LAN listener, relay link
	// and outbox.
	DaemonStatus(ctx context.Context) (DaemonStatus, error)
	// StopDaemon begins a graceful stop (the same as SIGTERM: requests in flight finish, pushes
	// in flight finish or stay pending) and answers at once; the process exits soon after.
	StopDaemon(ctx context.Context) (DaemonStatus, error)
	// RotateKeys rotates the host's keys in the running daemon (`agentmbx id rotate`): it answers
	// once the daemon serves with the new keys; the daemon then tells the peers and the relay.
	RotateKeys(ctx context.Context) (*Rotation, error)
}

// DaemonStatus is `agentmbx daemon status --json`.
type DaemonStatus struct {
	Running   bool   `json:"running"`
	PID       int    `json:"pid,omitempty"`
	StartedAt string `json:"started_at,omitempty"`
	// UptimeS is the seconds since the daemon started.
	UptimeS  int64  `json:"uptime_s"`
	Version  string `json:"version,omitempty"`
	Host     string `json:"host,omitempty"`
	Home     string `json:"home,omitempty"`
	LAN      string `json:"lan"`                 // listening, retrying (the bind failed) or off
	Listen   string `json:"listen,omitempty"`    // the bound (or wanted) LAN address
	LANError string `json:"lan_error,omitempty"` // why the bind failed, while it is retried
	// Relay is the relay link's state: none (no relay pinned), stopped (the relay served another
	// key), not-enrolled, failing (an operation's last try failed) or ok.
	Relay    string `json:"relay"`
	RelayURL string `json:"relay_url,omitempty"`
	// RelayProblems names the relay operations whose last try failed.
	RelayProblems []string `json:"relay_problems,omitempty"`
	// Outbox counts the outbox rows by state (every state, zeros included).
	Outbox map[string]int `json:"outbox"`
	// LANAlerts are the peers whose LAN address answers without their pinned key's signature.
	LANAlerts []LANAlert `json:"lan_alerts,omitempty"`
	// Reach is whether the relay and the peers' LAN addresses answer (Status.Reach).
	Reach []Reach `json:"reach,omitempty"`
}
