package outbox

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// Limits on what a row holds. Input beyond them is refused with ErrInvalid.
const (
	// MaxWire is the largest wire value accepted (a sealed envelope is bounded well below it by
	// the envelope limits: 256 KiB of plaintext body).
	MaxWire = 4 << 20
	// MaxItemID is the longest item id (a receipt item id carries a recipient of up to 300
	// characters).
	MaxItemID = 512
	// MaxText bounds free text kept in a row: subject, agent, errors and reasons, relay URL, epoch.
	// Errors and reasons longer than this are cut (not refused); the others are refused.
	MaxText = 2048
	// MaxStatement bounds a relay accept statement.
	MaxStatement = 64 << 10
)

// receiptPrefix starts every receipt item id: "receipt:<msg>:<recipient>:<seq>".
const receiptPrefix = "receipt:"

// Key names a row: one item for one target host. For an envelope the item id is the message id;
// for a receipt it is "receipt:<msg>:<recipient>:<seq>". Host is the target's host name as this
// host pinned it (names are compared exactly; the caller passes the pinned spelling).
type Key struct {
	ItemID string
	Host   string
}

// String prints "<item id>→<host>".
func (k Key) String() string { return k.ItemID + "→" + k.Host }

// NewRow is what Add needs to create a pending row. The wire bytes are stored as given, once,
// before any attempt; they are returned unchanged by every later read and never replaced.
type NewRow struct {
	Kind    Kind   // KindEnvelope or KindReceipt
	ItemID  string // message id (envelope), or "receipt:<msg>:<recipient>:<seq>" (receipt)
	Host    string // target host name (pinned peer name)
	HostKey string // target host key: 44-char padded standard base64 of the Ed25519 key
	Wire    []byte // the exact bytes to send: the sealed envelope JSON, or canonical {rec, sig}
	// Agent is the local agent that sent the message (receives the alert). Optional for receipts.
	Agent string
	// Subject is the message subject, kept for the alert text. Optional.
	Subject string
	// Transport is the transport to try first, when the caller already knows it (TransportNone
	// leaves the choice to the first attempt).
	Transport Transport
}

// Key returns the key the row will have.
func (n NewRow) Key() Key { return Key{ItemID: n.ItemID, Host: n.Host} }

// Row is one stored row. Rows returned by Get and Due carry Wire; listings do not (Wire is nil).
//
// Times have millisecond precision and are in UTC; a zero time means "not set". JSON (for
// `agentmbx outbox --json` and the control socket) uses snake_case names, ISO-8601 times with
// milliseconds or null, and leaves Wire out.
type Row struct {
	ItemID  string // relay item id: the message id for an envelope
	MsgID   string // the message: equal to ItemID for an envelope, the receipted message for a receipt
	Host    string // target host name
	HostKey string // target host key (base64)
	Kind    Kind
	Agent   string // local sender agent
	Subject string // message subject (for alerts)

	State       State
	Transport   Transport // last transport used (or the preferred one before the first attempt)
	Attempts    int       // attempts made: failures, rejections and the successful one
	LANFailures int       // failed LAN attempts (transport selection moves a row to the relay at 2)
	CreatedAt   time.Time
	UpdatedAt   time.Time
	// NextAt is when the row is next due. It is set exactly when the row is in the due index:
	// pending rows, and relay-accepted rows flagged for a re-push.
	NextAt    time.Time
	LastError string // the last attempt's error or retryable rejection; cleared on acceptance
	Reason    string // why the row ended (expired, unconfirmed, rejected); empty otherwise
	// Repush is set on a relay-accepted row that must be pushed to the relay again (epoch
	// change). It is due like a pending row but goes to the relay only.
	Repush bool

	Relay      string    // relay URL of the last acceptance
	Epoch      string    // relay epoch of the last acceptance
	Seq        int64     // relay seq of the last acceptance
	AcceptedAt time.Time // the accept statement's time
	// Deadline is when an active row ends by itself: CreatedAt + LAN deadline (72 h) while
	// pending, AcceptedAt + retention + grace (24 h) once relay-accepted.
	Deadline time.Time
	EndedAt  time.Time // when the row entered an ended state
	// RelayV1At is when a v1 relay (Relay) last said it stored the row's item. A v1 relay signs
	// nothing, so that is no acceptance: an envelope row stays pending, pushed again on its
	// backoff, until its delivery receipt (MarkRelaySentV1).
	RelayV1At time.Time
	// LANUnsignedAt is when the peer's LAN address last said it stored the row's item without a
	// signed LAN accept statement, from a peer taken for one that cannot sign (0.5.x): no
	// delivery, so an envelope row stays pending until its delivery receipt (MarkLANUnsigned).
	LANUnsignedAt time.Time

	Statement    []byte // the relay accept statement bytes, exactly as signed
	StatementSig string // the relay's signature over Statement (base64)

	Wire []byte // the wire bytes (Get, Due and Claim only)
}

// Key returns the row's key.
func (r Row) Key() Key { return Key{ItemID: r.ItemID, Host: r.Host} }

// due reports whether the row belongs in the due index.
func (r *Row) due() bool {
	return r.State == StatePending || (r.State == StateRelayAccepted && r.Repush)
}

// isoLayout is JavaScript's toISOString form, used everywhere else in agentmbx.
const isoLayout = "2006-01-02T15:04:05.000Z"

// rowJSON is Row's JSON form. Times are pointers so that a zero time is null.
type rowJSON struct {
	MsgID        string    `json:"msg_id"`
	ItemID       string    `json:"item_id"`
	Kind         Kind      `json:"kind"`
	Host         string    `json:"host"`
	HostKey      string    `json:"host_key"`
	Agent        string    `json:"agent"`
	Subject      string    `json:"subject"`
	State        State     `json:"state"`
	Transport    Transport `json:"transport"`
	Attempts     int       `json:"attempts"`
	LANFailures  int       `json:"lan_failures"`
	CreatedAt    *string   `json:"created_at"`
	UpdatedAt    *string   `json:"updated_at"`
	NextAt       *string   `json:"next_at"`
	LastError    string    `json:"last_error"`
	Reason       string    `json:"reason"`
	Repush       bool      `json:"repush"`
	Relay        string    `json:"relay"`
	Epoch        string    `json:"epoch"`
	Seq          int64     `json:"seq"`
	AcceptedAt   *string   `json:"accepted_at"`
	Deadline     *string   `json:"deadline"`
	EndedAt      *string   `json:"ended_at"`
	RelayV1At    *string   `json:"relay_v1_at,omitempty"`
	LANUnsigned  *string   `json:"lan_unsigned_at,omitempty"`
	Statement    []byte    `json:"accept_statement,omitempty"`
	StatementSig string    `json:"accept_sig,omitempty"`
}

func jsonTime(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	s := t.UTC().Format(isoLayout)
	return &s
}

func parseJSONTime(name string, s *string) (time.Time, error) {
	if s == nil {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, *s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%w: %s: %v", ErrInvalid, name, err)
	}
	return msTime(t), nil
}

// MarshalJSON writes the row in its listing form (see Row).
func (r Row) MarshalJSON() ([]byte, error) {
	return json.Marshal(rowJSON{
		MsgID: r.MsgID, ItemID: r.ItemID, Kind: r.Kind, Host: r.Host, HostKey: r.HostKey,
		Agent: r.Agent, Subject: r.Subject, State: r.State, Transport: r.Transport,
		Attempts: r.Attempts, LANFailures: r.LANFailures,
		CreatedAt: jsonTime(r.CreatedAt), UpdatedAt: jsonTime(r.UpdatedAt), NextAt: jsonTime(r.NextAt),
		LastError: r.LastError, Reason: r.Reason, Repush: r.Repush,
		Relay: r.Relay, Epoch: r.Epoch, Seq: r.Seq,
		AcceptedAt: jsonTime(r.AcceptedAt), Deadline: jsonTime(r.Deadline), EndedAt: jsonTime(r.EndedAt),
		RelayV1At: jsonTime(r.RelayV1At), LANUnsigned: jsonTime(r.LANUnsignedAt), Statement: r.Statement, StatementSig: r.StatementSig,
	})
}

// UnmarshalJSON reads what MarshalJSON wrote (Wire stays nil).
func (r *Row) UnmarshalJSON(b []byte) error {
	var j rowJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	out := Row{
		MsgID: j.MsgID, ItemID: j.ItemID, Kind: j.Kind, Host: j.Host, HostKey: j.HostKey,
		Agent: j.Agent, Subject: j.Subject, State: j.State, Transport: j.Transport,
		Attempts: j.Attempts, LANFailures: j.LANFailures,
		LastError: j.LastError, Reason: j.Reason, Repush: j.Repush,
		Relay: j.Relay, Epoch: j.Epoch, Seq: j.Seq,
		Statement: j.Statement, StatementSig: j.StatementSig,
	}
	for _, f := range []struct {
		name string
		src  *string
		dst  *time.Time
	}{
		{"created_at", j.CreatedAt, &out.CreatedAt},
		{"updated_at", j.UpdatedAt, &out.UpdatedAt},
		{"next_at", j.NextAt, &out.NextAt},
		{"accepted_at", j.AcceptedAt, &out.AcceptedAt},
		{"deadline", j.Deadline, &out.Deadline},
		{"ended_at", j.EndedAt, &out.EndedAt},
		{"relay_v1_at", j.RelayV1At, &out.RelayV1At},
		{"lan_unsigned_at", j.LANUnsigned, &out.LANUnsignedAt},
	} {
		t, err := parseJSONTime(f.name, f.src)
		if err != nil {
			return err
		}
		*f.dst = t
	}
	*r = out
	return nil
}

// msTime truncates t to milliseconds in UTC, the precision rows keep.
func msTime(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return time.UnixMilli(t.UnixMilli()).UTC()
}

// ---- validation ----

// validHost reports whether s is a host name: ^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$.
func validHost(s string) bool {
	if len(s) == 0 || len(s) > 63 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case i > 0 && (c == '.' || c == '_' || c == '-'):
		default:
			return false
		}
	}
	return true
}

// validHostKey reports whether s is a 44-character padded standard base64 32-byte key.
func validHostKey(s string) bool {
	if len(s) != 44 || s[43] != '=' || s[42] == '=' {
		return false
	}
	b, err := base64.StdEncoding.Strict().DecodeString(s)
	return err == nil && len(b) == 32
}

// checkText checks free text: valid UTF-8, no control characters, at most max bytes; empty only
// when allowEmpty.
func checkText(field, s string, max int, allowEmpty bool) error {
	if s == "" {
		if allowEmpty {
			return nil
		}
		return fmt.Errorf("%w: %s is empty", ErrInvalid, field)
	}
	if len(s) > max {
		return fmt.Errorf("%w: %s is longer than %d bytes", ErrInvalid, field, max)
	}
	if !utf8.ValidString(s) {
		return fmt.Errorf("%w: %s is not valid UTF-8", ErrInvalid, field)
	}
	for _, c := range s {
		if c < 0x20 || c == 0x7f || (c >= 0x80 && c < 0xa0) {
			return fmt.Errorf("%w: %s contains a control character", ErrInvalid, field)
		}
	}
	return nil
}

// cleanText makes an error or reason storable: invalid UTF-8 and control characters become
// U+FFFD or spaces, surrounding space is trimmed, and the text is cut to MaxText bytes on a rune
// boundary.
func cleanText(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.TrimSpace(strings.Map(func(c rune) rune {
		if c < 0x20 || c == 0x7f || (c >= 0x80 && c < 0xa0) {
			return ' '
		}
		return c
	}, s))
	if len(s) > MaxText {
		cut := MaxText
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut]
	}
	return s
}

func checkKey(k Key) error {
	if err := checkText("item id", k.ItemID, MaxItemID, false); err != nil {
		return err
	}
	if !validHost(k.Host) {
		return fmt.Errorf("%w: host %q is not a host name", ErrInvalid, k.Host)
	}
	return nil
}

// receiptMsg returns the message id inside a receipt item id "receipt:<msg>:<recipient>:<seq>".
func receiptMsg(itemID string) (string, bool) {
	rest, ok := strings.CutPrefix(itemID, receiptPrefix)
	if !ok {
		return "", false
	}
	msg, after, ok := strings.Cut(rest, ":")
	if !ok || msg == "" || after == "" {
		return "", false
	}
	return msg, true
}

// check validates n and returns the row's MsgID.
func (n *NewRow) check() (string, error) {
	if err := checkKey(Key{ItemID: n.ItemID, Host: n.Host}); err != nil {
		return "", err
	}
	msg := n.ItemID
	switch n.Kind {
	case KindEnvelope:
		if strings.HasPrefix(n.ItemID, receiptPrefix) {
			return "", fmt.Errorf("%w: envelope item id %q has the receipt prefix", ErrInvalid, n.ItemID)
		}
	case KindReceipt:
		m, ok := receiptMsg(n.ItemID)
		if !ok {
			return "", fmt.Errorf("%w: receipt item id %q is not receipt:<msg>:<recipient>:<seq>", ErrInvalid, n.ItemID)
		}
		msg = m
	default:
		return "", fmt.Errorf("%w: kind %d", ErrInvalid, uint8(n.Kind))
	}
	if !validHostKey(n.HostKey) {
		return "", fmt.Errorf("%w: host key for %s is not a base64 Ed25519 public key", ErrInvalid, n.Host)
	}
	if len(n.Wire) == 0 {
		return "", fmt.Errorf("%w: wire bytes are empty", ErrInvalid)
	}
	if len(n.Wire) > MaxWire {
		return "", fmt.Errorf("%w: wire bytes are %d bytes (limit %d)", ErrInvalid, len(n.Wire), MaxWire)
	}
	if err := checkText("agent", n.Agent, 300, true); err != nil {
		return "", err
	}
	if err := checkText("subject", n.Subject, MaxText, true); err != nil {
		return "", err
	}
	if n.Transport > TransportRelay {
		return "", fmt.Errorf("%w: transport %d", ErrInvalid, uint8(n.Transport))
	}
	return msg, nil
}
