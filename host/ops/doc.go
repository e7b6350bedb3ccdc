// Package ops is what operators watch on a host daemon (Ops): counters of the attempts it
// recorded and the delivery receipts it applied (Counters, bumped by package host once the
// transaction holding them committed), a snapshot of its state for metrics (Snapshot: the outbox
// by state, the oldest pending row, the counters, the quarantine and the relay link), and health
// and readiness (Checker: GET /healthz and GET /readyz, served on the control socket and by
// `daemon --metrics-listen`). It reads the host through the functions of Config and writes
// nothing itself.
package ops
