// Package api is the contract between a host and the programs that use it: the requests and
// answers of the local control socket, and the Service interface that both the host itself (on its
// store, when no daemon runs) and the client SDK (over the daemon's socket) implement. Commands
// are written once against Service and work either way.
//
// # The control socket
//
// The daemon serves HTTP on a Unix socket in the host home (SocketName, mode 0600). Every request
// and answer body is JSON. Errors are answered with a non-2xx status and an Error body. Routes:
//
//	POST /v1/send          SendRequest            → SendResult
//	GET  /v1/inbox         ?agent=&all=1          → []Message
//	POST /v1/read          ReadRequest            → Message
//	POST /v1/ack           AckRequest             → Message
//	GET  /v1/sent          ?id=                   → Sent
//	GET  /v1/outbox                               → []OutboxRow
//	GET  /v1/agents                               → []Agent
//	POST /v1/agents        Agent                  → Agent
//	GET  /v1/peers                                → []Peer
//	POST /v1/peers         PeerCard (raw card)    → Peer
//	DELETE /v1/peers       ?host=                 → {}
//	GET  /v1/wait          ?agent=&timeout=30s    → []Message (unread mail; empty on timeout)
//	GET  /v1/status                               → Status
package api

import (
	"context"
	"time"
)

// SocketName is the control socket's file name in the host home.
const SocketName = "agentmbx.sock"

// Service is what a host offers its agents and its owner. *host.Host implements it on the store;
// client.Client implements it over the control socket.
type Service interface {
	// Send accepts a message for delivery and returns once it is durable (every outbox row and
	// local delivery committed). Addresses: name@host, bare name, role:<role>, *, owner.
	Send(ctx context.Context, req SendRequest) (SendResult, error)
	// Inbox lists an agent's mail: unread (not yet read) by default, everything with all.
	Inbox(ctx context.Context, agent string, all bool) ([]Message, error)
	// Read returns one message of an agent's and marks it read.
	Read(ctx context.Context, req ReadRequest) (Message, error)
	// Ack marks a message acknowledged by the agent, with an optional note.
	Ack(ctx context.Context, req AckRequest) (Message, error)
	// Sent shows the per-recipient delivery state of a message this host sent.
	Sent(ctx context.Context, id string) (Sent, error)
	// Outbox lists the outbox rows (one per message and target host).
	Outbox(ctx context.Context) ([]OutboxRow, error)
	// Agents lists the local agents; AddAgent registers one (idempotent; the role may be updated).
	Agents(ctx context.Context) ([]Agent, error)
	AddAgent(ctx context.Context, a Agent) (Agent, error)
	// Peers lists the paired hosts; AddPeer pins a peer from its signed host card (refused when the
	// signature fails); RemovePeer unpins one.
	Peers(ctx context.Context) ([]Peer, error)
	AddPeer(ctx context.Context, card []byte) (Peer, error)
	RemovePeer(ctx context.Context, host string) error
	// Wait blocks until the agent has unread mail or the timeout passes, and returns the unread
	// mail (empty on timeout). It is how an agent waits for new mail without polling.
	Wait(ctx context.Context, agent string, timeout time.Duration) ([]Message, error)
	// Status describes the host.
	Status(ctx context.Context) (Status, error)
}

// SendRequest is a message to send. From is a local agent name (registered on first use).
type SendRequest struct {
	From       string   `json:"from"`
	To         []string `json:"to"`
	Subject    string   `json:"subject,omitempty"`
	Body       string   `json:"body"`
	Kind       string   `json:"kind,omitempty"` // default "message"
	Thread     string   `json:"thread,omitempty"`
	ReplyTo    string   `json:"reply_to,omitempty"`
	Refs       []string `json:"refs,omitempty"`
	NeedsReply bool     `json:"needs_reply,omitempty"`
}

// SendResult says where a message went.
type SendResult struct {
	ID    string   `json:"id"`
	Local []string `json:"local,omitempty"` // local recipients (name@thishost), delivered already
	Hosts []string `json:"hosts,omitempty"` // remote hosts, one outbox row each
}

// Message is a message as an agent sees it in its mailbox.
type Message struct {
	ID         string   `json:"id"`
	From       string   `json:"from"`
	To         []string `json:"to"`
	Subject    string   `json:"subject"`
	Body       string   `json:"body"`
	Kind       string   `json:"kind"`
	TS         string   `json:"ts"`
	Thread     string   `json:"thread,omitempty"`
	ReplyTo    string   `json:"reply_to,omitempty"`
	NeedsReply bool     `json:"needs_reply,omitempty"`
	Agent      string   `json:"agent"` // the local recipient this copy belongs to
	State      string   `json:"state"` // delivered, notified, read, acked
	Note       string   `json:"note,omitempty"`
}

// ReadRequest names one message in an agent's mailbox.
type ReadRequest struct {
	ID    string `json:"id"`
	Agent string `json:"agent"`
}

// AckRequest acknowledges a message.
type AckRequest struct {
	ID    string `json:"id"`
	Agent string `json:"agent"`
	Note  string `json:"note,omitempty"`
}

// Recipient is the delivery state of one recipient of a sent message.
type Recipient struct {
	Recipient string `json:"recipient"` // name@host
	Host      string `json:"host"`
	State     string `json:"state"` // queued, delivered, notified, read, acked
	At        string `json:"at,omitempty"`
	Note      string `json:"note,omitempty"`
}

// Sent is what `agentmbx sent ID` shows.
type Sent struct {
	ID         string      `json:"id"`
	Subject    string      `json:"subject"`
	From       string      `json:"from"`
	Recipients []Recipient `json:"recipients"`
	Rows       []OutboxRow `json:"rows"`
}

// OutboxRow is one outbox row as listed by `agentmbx outbox --json`.
type OutboxRow struct {
	MsgID      string `json:"msg_id"`
	Host       string `json:"host"`
	Kind       string `json:"kind"`
	State      string `json:"state"`
	Transport  string `json:"transport"`
	Attempts   int    `json:"attempts"`
	NextAt     string `json:"next_at,omitempty"`
	LastError  string `json:"last_error,omitempty"`
	Relay      string `json:"relay,omitempty"`
	Epoch      string `json:"epoch,omitempty"`
	Seq        int64  `json:"seq,omitempty"`
	AcceptedAt string `json:"accepted_at,omitempty"`
	Deadline   string `json:"deadline,omitempty"`
}

// Agent is a local agent.
type Agent struct {
	Name string `json:"name"`
	Role string `json:"role,omitempty"`
}

// Peer is a paired host.
type Peer struct {
	Host        string `json:"host"`
	HostPubkey  string `json:"host_pubkey"`
	Fingerprint string `json:"fingerprint"`
	EncPub      string `json:"enc_pub"`
	Addr        string `json:"addr,omitempty"`
}

// Status describes a host.
type Status struct {
	Host        string `json:"host"`
	HostPubkey  string `json:"host_pubkey"`
	Fingerprint string `json:"fingerprint"`
	Listen      string `json:"listen,omitempty"`
	Daemon      bool   `json:"daemon"`
	Peers       int    `json:"peers"`
	Agents      int    `json:"agents"`
	OutboxDue   int    `json:"outbox_active"`
}

// Error is the body of a failed control-socket request.
type Error struct {
	Error string `json:"error"`
	Code  string `json:"code,omitempty"` // a stable word: bad_request, not_found, ...
	Hint  string `json:"hint,omitempty"`
}
