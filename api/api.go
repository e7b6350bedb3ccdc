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
//	GET  /v1/relay                                → RelayStatus
//	POST /v1/relay/set     RelaySetRequest        → RelayStatus
//	POST /v1/relay/unset                          → RelayStatus
//	GET  /v1/relay/quarantine                     → []QuarantineItem
//	GET  /v1/card          ?addr=                 → the signed host card (CardIssuer)
//	POST /v1/pair/start    PairStartRequest       → PairStartAnswer
//	GET  /v1/pair                                 → PairingState
//	GET  /v1/pair/wait     ?from=waiting&timeout= → PairingState (once it is not from, or on timeout)
//	POST /v1/pair/join     PairJoinRequest        → PairingState (with the code)
//	POST /v1/pair/confirm  PairConfirmRequest     → Peer (waits for the other side)
//	POST /v1/pair/cancel                          → {}
//
// The quarantine actions (release, purge; quarantine.go) are served for a service that also
// implements QuarantineService.
// The daemon routes (its status, and stopping it; daemon.go) are served for a service that also
// implements DaemonService.
// The outbox routes (retry and pages; outbox.go) are served for a service that also implements
// OutboxService.
// The mail routes (threads, search, replies, inbox pages, waiting for new mail; see mail.go) are
// served for a service that also implements MailService, the event stream (events.go) for one
// that implements EventService. The relay routes are served for a
// service that also implements RelayService, the pairing
// routes when the daemon has a PairingService. An error's Code is one of the Code constants; each
// maps to one sentinel (ErrNotFound, ...) and one HTTP status (errors.go). Package host/control
// serves these routes; package client calls them.
package api

import (
	"context"
	"time"
)

// SocketName is the control socket's file name in the host home.
const SocketName = "agentmbx.sock"

// DefaultWait is the long-poll timeout of GET /v1/wait without a timeout parameter; MaxWait is
// the longest it accepts.
const (
	DefaultWait = 30 * time.Second
	MaxWait     = 10 * time.Minute
)

// Service is what a host offers its agents and its owner. host.Service implements it on the store
// (Host.Service); client.Client implements it over the control socket.
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
	// Outbox lists every outbox row (one per message and target host); OutboxService.OutboxPage
	// lists a bounded page.
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
	// Deliveries is how many times this copy was put in the agent's mailbox: 1, as the dedup of
	// received mail keeps it; more would be a re-delivery (the test oracles look for one). 0 for
	// a copy delivered before the host counted, and for mail the agent sent and holds no copy of.
	Deliveries int `json:"deliveries,omitempty"`
	// Origin is the paired host the message came from ("" for mail written on this host).
	Origin string `json:"origin,omitempty"`
	// Via is how it reached this host: ViaLAN or ViaRelay (its signature verified by the
	// origin's pinned key before it was stored), ViaLocal (written on this host); "" when not
	// recorded (mail stored by a version that did not record it).
	Via string `json:"via,omitempty"`
	// Fingerprint is the fingerprint of the host key whose signature was verified on arrival (as
	// `agentmbx peers` shows it), or this host's for local mail; "" when not recorded.
	Fingerprint string `json:"fingerprint,omitempty"`
}

// How a message reached this host (Message.Via).
const (
	ViaLAN   = "lan"
	ViaRelay = "relay"
	ViaLocal = "local"
)

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
	// RelayV1At is when a v1 relay (Relay) last said it stored the row: unsigned, so the row
	// stays pending until its delivery receipt.
	RelayV1At string `json:"relay_v1_at,omitempty"`
	// LANUnsignedAt is when the peer last said over the LAN that it stored the row without a
	// signed statement (a peer that cannot sign, 0.5.x): not a delivery, so the row waits for
	// its delivery receipt.
	LANUnsignedAt string `json:"lan_unsigned_at,omitempty"`
	// Reason and EndedAt say why and when a row ended (expired, unconfirmed, rejected, done).
	Reason  string `json:"reason,omitempty"`
	EndedAt string `json:"ended_at,omitempty"`
	// Waiting says in plain words why an active row waits (the relay paused or stopped, the peer
	// unreachable since a time, the next attempt); set by the host's listings.
	Waiting string `json:"waiting,omitempty"`
}

// Agent is a local agent.
type Agent struct {
	Name string `json:"name"`
	Role string `json:"role,omitempty"`
	// CreatedByMail, when set, is the sender whose incoming mail created this agent: nobody
	// registered the name here (it may be a sender's typo). `agents add NAME` adopts it.
	CreatedByMail string `json:"created_by_mail,omitempty"`
}

// Peer is a paired host.
type Peer struct {
	Host        string `json:"host"`
	HostPubkey  string `json:"host_pubkey"`
	Fingerprint string `json:"fingerprint"`
	EncPub      string `json:"enc_pub"`
	Addr        string `json:"addr,omitempty"`
	// RetiredFingerprints are the fingerprints of the host keys the peer rotated away from
	// (still valid for what it signed before), oldest first.
	RetiredFingerprints []string `json:"retired_fingerprints,omitempty"`
	// RotatedAt is when the peer's last applied key rotation was signed ("" for none).
	RotatedAt string `json:"rotated_at,omitempty"`
}

// Status describes a host.
type Status struct {
	Host        string `json:"host"`
	HostPubkey  string `json:"host_pubkey"`
	Fingerprint string `json:"fingerprint"`
	Listen      string `json:"listen,omitempty"`
	// LANError, while the daemon runs without its LAN listener, is why the bind failed (it is
	// retried with backoff; local and relay mail go on meanwhile).
	LANError  string `json:"lan_error,omitempty"`
	Daemon    bool   `json:"daemon"`
	Peers     int    `json:"peers"`
	Agents    int    `json:"agents"`
	OutboxDue int    `json:"outbox_active"`
	// Version is the agentmbx build that answered (the daemon's, over the socket).
	Version string `json:"version,omitempty"`
	// Rotation is the progress of this host's last key rotation (nil when it never rotated).
	Rotation *Rotation `json:"rotation,omitempty"`
	// LANAlerts are the peers whose LAN address answers without their pinned key's signature.
	LANAlerts []LANAlert `json:"lan_alerts,omitempty"`
	// Reach is what the daemon knows of whether its transport targets answer (empty when no
	// daemon runs, or before its first attempt).
	Reach []Reach `json:"reach,omitempty"`
}

// Reach is a transport target's reachability as the daemon last saw it.
type Reach struct {
	// Target is "relay", or "lan:HOST" for a paired peer's LAN address.
	Target string `json:"target"`
	// State is up (answers and takes), quiet (answers, fails everything), down (no answer: probed
	// every 5 s) or unknown.
	State string `json:"state"`
	Since string `json:"since,omitempty"` // when it entered State
	// OutageSince is when it went down first since it was last up, while it is not up yet.
	OutageSince string `json:"outage_since,omitempty"`
}

// LANAlert says that a pinned peer's LAN address answered a delivery without a valid LAN
// accept statement from the peer's pinned key, although the peer signs its answers (or with a
// statement the key did not make): something else answers there. The rows it answered stay
// pending; the alert clears when the peer's signed answer comes again.
type LANAlert struct {
	Host        string `json:"host"`
	Fingerprint string `json:"fingerprint"` // of the pinned key the answers lack
	Addr        string `json:"addr"`        // the address that answered
	Since       string `json:"since"`       // the first such answer
	Last        string `json:"last"`        // the latest one
	Error       string `json:"error"`       // what the latest answer lacked
}

// LANAlertSummary is the alert's one-line wording.
const LANAlertSummary = "address now answered by another key"

// Error is the body of a failed control-socket request.
type Error struct {
	Error string `json:"error"`
	Code  string `json:"code,omitempty"` // a stable word: bad_request, not_found, ...
	Hint  string `json:"hint,omitempty"`
}

// RelayService is a host's use of a relay (the second transport, for peers the LAN does not
// reach): the pinned relay and what the host did with it. The host's relay link
// (relaylink.Link, part of host.Service) implements it on the store; client.Client over the
// control socket.
type RelayService interface {
	// RelayStatus reports the pinned relay, enrolment and publications, the receive position,
	// relay-accepted rows, quarantined items and the last failures.
	RelayStatus(ctx context.Context) (RelayStatus, error)
	// RelaySet fetches the relay's info and pins its key (trust on first use without Key; with
	// Key the served key must have that fingerprint). Setting it again confirms a changed key.
	RelaySet(ctx context.Context, req RelaySetRequest) (RelayStatus, error)
	// RelayUnset forgets the relay: nothing more goes through it or is pulled from it.
	RelayUnset(ctx context.Context) (RelayStatus, error)
	// RelayQuarantine lists the relay items this host rejected (never dropped).
	RelayQuarantine(ctx context.Context) ([]QuarantineItem, error)
}

// RelaySetRequest pins a relay.
type RelaySetRequest struct {
	URL string `json:"url"`
	// Key is the relay key's fingerprint (or the full base64 key) the owner expects; "" trusts
	// the served key on first use.
	Key string `json:"key,omitempty"`
	// CA is a PEM bundle of CA certificates trusted for the relay's TLS certificate besides the
	// system roots (a private CA); "" trusts the system roots only.
	CA string `json:"ca,omitempty"`
	// TokenFile is an absolute path to a file holding the account token to enrol with (a hosted
	// relay); it is read again at each enrolment. "" enrols with $MBX_RELAY_TOKEN when the daemon
	// has it, else by the host-key challenge.
	TokenFile string `json:"token_file,omitempty"`
	// AllowV1 accepts a relay that speaks only the v1 API of AgentMBX 0.5.x before 0.5.5
	// (it answers 404 to /v2/relay/info): such a relay has no key, so nothing it answers is
	// signed. Without it, relay set refuses a v1 relay; with Key, it always does.
	AllowV1 bool `json:"allow_v1,omitempty"`
	// AllowHTTP allows a plain http:// URL to a relay that is not on this machine (hops are
	// signed and bodies sealed, but who talks to whom travels in clear); without it only
	// loopback relays may be http://.
	AllowHTTP bool `json:"allow_http,omitempty"`
}

// RelayToken is what this host knows of its account token (read, not verified: the relay does).
type RelayToken struct {
	Source  string `json:"source"`            // the token file, or $MBX_RELAY_TOKEN
	Exp     string `json:"exp,omitempty"`     // its exp claim
	Expired bool   `json:"expired,omitempty"` // exp has passed
	Account string `json:"account,omitempty"` // its account claim
	Error   string `json:"error,omitempty"`   // it could not be read or parsed
}

// RelayStatus is what `agentmbx relay status` shows.
type RelayStatus struct {
	Configured  bool   `json:"configured"`
	URL         string `json:"url,omitempty"`
	RelayPubkey string `json:"relay_pubkey,omitempty"`
	Fingerprint string `json:"fingerprint,omitempty"`
	PinnedAt    string `json:"pinned_at,omitempty"`
	// CA is the PEM bundle of the private CA pinned with the relay ("" for the system roots).
	CA string `json:"ca,omitempty"`
	// TOFU says the key was trusted on first use (relay set without --key).
	TOFU bool `json:"tofu,omitempty"`
	// Replaced is the fingerprint of the key this pin replaced (a relay set that confirmed a
	// changed key), in the answer to RelaySet only.
	Replaced string `json:"replaced,omitempty"`
	// Stopped is set while relay use is stopped because the relay served another key; KeyChange
	// says which. `relay set` with the new key resumes.
	Stopped   bool            `json:"stopped,omitempty"`
	KeyChange *RelayKeyChange `json:"key_change,omitempty"`
	// Epoch is the relay epoch this host last saw.
	Epoch      string `json:"epoch,omitempty"`
	Enrolled   bool   `json:"enrolled"`
	EnrolledAt string `json:"enrolled_at,omitempty"`
	// EncAdExp is when the enc-key ad published at the relay expires (it is republished daily).
	EncAdAt  string `json:"enc_ad_at,omitempty"`
	EncAdExp string `json:"enc_ad_exp,omitempty"`
	// Senders is how many peer keys the published sender allowlist names.
	SendersAt string `json:"senders_at,omitempty"`
	Senders   int    `json:"senders"`
	// SendersCurrent says the published allowlist names exactly the peers pinned now.
	SendersCurrent bool `json:"senders_current,omitempty"`
	// ReceivedThrough and PositionEpoch are the receive checkpoint at this relay.
	ReceivedThrough int64  `json:"received_through"`
	PositionEpoch   string `json:"position_epoch,omitempty"`
	Resets          int    `json:"resets,omitempty"`
	// RelayAccepted counts the outbox rows the relay holds that wait for their delivery receipt.
	RelayAccepted int `json:"relay_accepted"`
	// Quarantined counts the items held in quarantine (all relays).
	Quarantined int `json:"quarantined"`
	// Problems are the last failures of each relay operation, until it next succeeds.
	Problems []RelayProblem `json:"problems,omitempty"`
	// Daemon says the answer came from a running daemon (which is the one using the relay).
	Daemon bool `json:"daemon"`
	// Account is the account the relay says this host's enrolment proved ("" for none).
	Account string `json:"account,omitempty"`
	// Token is the account token this host enrols with (nil for none).
	Token *RelayToken `json:"token,omitempty"`
	// V1 says the pinned relay speaks only the v1 API (relay set --allow-v1): it has no key
	// (RelayPubkey and Fingerprint are empty), no epoch and no accept statements.
	V1 bool `json:"v1,omitempty"`
	// V2 is set when a relay pinned as v1 was last seen answering v2: the key it served, to pin
	// with relay set --key.
	V2 *RelayV2Seen `json:"v2,omitempty"`
}

// RelayV2Seen is the relay key a relay pinned as v1 served when it started answering v2.
type RelayV2Seen struct {
	RelayPubkey string `json:"relay_pubkey"`
	Fingerprint string `json:"fingerprint"`
	At          string `json:"at"`
}

// RelayKeyChange is a relay key other than the pinned one, as the relay served it.
type RelayKeyChange struct {
	Pinned string `json:"pinned"` // fingerprint of the pinned key
	Served string `json:"served"` // fingerprint of the served key
	At     string `json:"at"`
}

// RelayProblem is the last failure of one relay operation (enrol, enc-ad, senders, push, pull).
type RelayProblem struct {
	Op    string `json:"op"`
	Error string `json:"error"`
	At    string `json:"at"`
	// Kind is RelayRefused when the relay answered and refused (retrying the same will not
	// help), else RelayTransient (unreachable, busy, a broken answer, a local failure: retried).
	// Records written before kinds existed have none and read as transient.
	Kind string `json:"kind,omitempty"`
}

// Kinds of RelayProblem.
const (
	RelayRefused   = "refused"
	RelayTransient = "transient"
)

// Refused reports whether the relay refused the operation.
func (p RelayProblem) Refused() bool { return p.Kind == RelayRefused }

// QuarantineItem is one relay item this host rejected, kept with its wire bytes.
type QuarantineItem struct {
	// ID names the entry (hex; `relay quarantine release` takes it or a unique prefix of it).
	ID     string `json:"id"`
	Relay  string `json:"relay"`
	Epoch  string `json:"epoch"`
	Seq    int64  `json:"seq"`
	ItemID string `json:"item_id"`
	Kind   string `json:"kind"`
	Sender string `json:"sender"`         // the pushing host's key (base64)
	Host   string `json:"host,omitempty"` // the pinned peer of that key, when there is one
	Cause  string `json:"cause"`
	Reason string `json:"reason"`
	Bytes  int    `json:"bytes"`
	At     string `json:"at"`
}
