// Package mcp is agentmbx's Model Context Protocol server: an agent's mailbox as tools
// (mbx_whoami, mbx_agents, mbx_send, mbx_reply, mbx_inbox, mbx_read, mbx_ack, mbx_sent,
// mbx_thread, mbx_search, mbx_wait), built on the official Go SDK and served on stdio by
// `agentmbx mcp`.
//
// Each tool call reaches the host through a Connect: the daemon's control socket (package
// client) when the daemon runs; the command line also lets a call open the store when none
// does, as its other commands do, so mbx_send still queues. mbx_wait needs the daemon and says
// so. The agent is registered with the host on the first call.
//
// The agent's mail is also offered as resources, mbx://inbox and mbx://thread/{id}, that a
// client can subscribe to: notifications/resources/updated follows each delivery into the
// agent's mailbox, driven by the daemon's delivery-event stream (see resources.go).
//
// Every tool returns structured content (bodies exactly as sent) and a short text summary in
// which another agent's text never carries control characters or bidirectional overrides
// (they are shown as \xNN or \u{NNNN}). Inputs are checked against their JSON schemas by the
// SDK; a bad input is a tool error that says what to fix.
package mcp
