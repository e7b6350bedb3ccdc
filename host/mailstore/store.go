package mailstore

import (
	"context"
	"strings"
	"time"

	"go.etcd.io/bbolt"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/host/agents"
	"github.com/agentmbx/agentmbx/host/internal/boltjson"
	"github.com/agentmbx/agentmbx/mbx"
)

// AgentMBX is the pseudo-sender of the host's own mail (alerts): no agent may send as it, and
// its mail cannot be answered.
const AgentMBX = agents.MBX

var (
	bucketMessages = []byte("messages") // msg id → Message JSON
	bucketMbox     = []byte("mbox")     // agent ‖ msg id → Copy JSON
	bucketUnread   = []byte("unread")   // agent ‖ msg id → "": copies delivered or notified
	// bucketDeliveries counts the times each copy was put in its mailbox (agent ‖ msg id → be64):
	// 1, unless a repeat got past the receiver's dedup. Stores older than the count lack entries
	// for the copies they held (read as 0).
	bucketDeliveries = []byte("deliveries")

	// bucketNoticed marks the new mail a notice has announced (agent ‖ msg id → ""): copies in
	// state delivered only, so it holds no more than the fresh index does.
	bucketNoticed = []byte("noticed")

	// Buckets are the store's buckets in the host's bbolt file: messages, mbox, unread,
	// deliveries, noticed and the indexes (IndexBuckets). The host creates them when it opens
	// the file.
	Buckets = append([][]byte{bucketMessages, bucketMbox, bucketUnread, bucketDeliveries, bucketNoticed}, IndexBuckets...)
)

// Message is a messages bucket value: the plaintext of a message some local agent holds (mail
// from another host after opening, mail sent on this host, and the host's own alerts).
type Message struct {
	ID         string   `json:"id"`
	TS         string   `json:"ts"`
	From       string   `json:"from"`
	To         []string `json:"to"`
	Subject    string   `json:"subject"`
	Body       string   `json:"body"`
	Kind       string   `json:"kind"`
	Thread     string   `json:"thread,omitempty"`
	ReplyTo    string   `json:"reply_to,omitempty"`
	Refs       []string `json:"refs,omitempty"`
	NeedsReply bool     `json:"needs_reply,omitempty"`
	// Origin is the peer host the message came from; "" for mail that started on this host.
	Origin string `json:"origin,omitempty"`
	// Via is how the message arrived (api.ViaLAN, api.ViaRelay, api.ViaLocal) and Key the
	// fingerprint of the host key that signed it, verified on arrival (this host's for local
	// mail). Both are "" in messages stored before they were recorded.
	Via string `json:"via,omitempty"`
	Key string `json:"key,omitempty"`
}

// Copy is a mbox bucket value: one local recipient's copy of a message and its state.
type Copy struct {
	State mbx.ReceiptState `json:"state"`
	At    string           `json:"at"`
	Note  string           `json:"note,omitempty"`
	// Seq is the seq of the last delivery receipt this host signed for the copy (mail from
	// another host only; 0 otherwise).
	Seq    int64  `json:"seq,omitempty"`
	Origin string `json:"origin,omitempty"`
}

// apiTx is agent's copy c of m as the control socket shows it, with the copy's delivery count.
func (m *Message) apiTx(tx *bbolt.Tx, agent string, c Copy) api.Message {
	v := m.api(agent, c)
	v.Deliveries = DeliveriesTx(tx, agent, m.ID)
	return v
}

func (m *Message) api(agent string, c Copy) api.Message {
	return api.Message{
		ID: m.ID, From: m.From, To: m.To, Subject: m.Subject, Body: m.Body, Kind: m.Kind, TS: m.TS,
		Thread: m.Thread, ReplyTo: m.ReplyTo, NeedsReply: m.NeedsReply,
		Agent: agent, State: c.State.String(), Note: c.Note,
		Origin: m.Origin, Via: m.Via, Fingerprint: m.Key,
	}
}

// Host is what the store needs of the host whose bbolt file it shares. Its Tx methods run inside
// the store's transaction.
type Host interface {
	// EnsureAgentTx registers a local agent on first use; createdBy is the sender of the mail
	// from another host that created it, else "".
	EnsureAgentTx(tx *bbolt.Tx, agent string, now time.Time, createdBy string) error
	// QueueReceiptTx signs the receipt of agent's copy c of message id and queues it for the
	// host origin the message came from.
	QueueReceiptTx(tx *bbolt.Tx, origin, id, agent string, c Copy, now time.Time) error
	// ReceiptsQueued is called after a commit that may have queued receipts.
	ReceiptsQueued()
	// SentTx reports whether message id was sent from this host.
	SentTx(tx *bbolt.Tx, id string) bool
	// PeersTx lists the names of the paired hosts.
	PeersTx(tx *bbolt.Tx) ([]string, error)
	// Send sends a message, as api.Service.Send (Reply sends through it).
	Send(ctx context.Context, req api.SendRequest) (api.SendResult, error)
}

// Config configures a Store.
type Config struct {
	DB    *bbolt.DB        // the host's store, with Buckets created
	Name  string           // this host's name
	Clock func() time.Time // default time.Now
	Host  Host
}

// Store is the agents' mail in the host's bbolt file. Its methods are safe for concurrent use.
type Store struct {
	db     *bbolt.DB
	name   string
	clock  func() time.Time
	host   Host
	mail   notifier // wakes Wait and WaitNew when a copy is delivered
	events hub      // feeds MailEvents
}

// New returns the mail store of cfg.DB.
func New(cfg Config) *Store {
	s := &Store{db: cfg.DB, name: cfg.Name, clock: cfg.Clock, host: cfg.Host}
	if s.clock == nil {
		s.clock = time.Now
	}
	s.mail.init()
	return s
}

// Close ends the waits in progress (Wait and WaitNew return api.ErrClosed) and the event
// subscriptions (their channels close), and refuses new ones. The bbolt file is the host's to
// close.
func (s *Store) Close() {
	s.mail.close()
	s.events.close()
}

// MessageTx reads message id.
func MessageTx(tx *bbolt.Tx, id string) (Message, bool, error) {
	var m Message
	found, err := getJSON(tx.Bucket(bucketMessages), []byte(id), &m)
	return m, found, err
}

// CopyTx reads agent's copy of message id.
func CopyTx(tx *bbolt.Tx, agent, id string) (Copy, bool, error) {
	var c Copy
	found, err := getJSON(tx.Bucket(bucketMbox), key(agent, id), &c)
	return c, found, err
}

// prefix is a ‖ 0x00: a prefix scan of it finds exactly a's keys (names and ids hold no NUL).
func prefix(a string) []byte { return append([]byte(a), 0) }

func getJSON(b *bbolt.Bucket, k []byte, v any) (bool, error) { return boltjson.Get(b, k, v) }

func putJSON(b *bbolt.Bucket, k []byte, v any) error { return boltjson.Put(b, k, v) }

// MessageIDsTx returns up to max ids of stored messages that begin with idPrefix, in order.
func MessageIDsTx(tx *bbolt.Tx, idPrefix string, max int) []string {
	var out []string
	c := tx.Bucket(bucketMessages).Cursor()
	for k, _ := c.Seek([]byte(idPrefix)); k != nil && len(out) < max && strings.HasPrefix(string(k), idPrefix); k, _ = c.Next() {
		out = append(out, string(k))
	}
	return out
}
