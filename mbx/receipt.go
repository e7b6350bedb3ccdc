package mbx

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// ReceiptState is how far a message got with one recipient, as the recipient's host reports it.
// States are ordered: a receipt never moves a recipient back to a lower state.
type ReceiptState int

// Receipt states in rank order.
const (
	ReceiptDelivered ReceiptState = iota + 1 // in the recipient's mailbox
	ReceiptNotified                          // the recipient agent was woken or told
	ReceiptRead                              // the recipient read it
	ReceiptAcked                             // the recipient acknowledged it (optionally with a did line)
)

var receiptStateNames = [...]string{ReceiptDelivered: "delivered", ReceiptNotified: "notified", ReceiptRead: "read", ReceiptAcked: "acked"}

// String returns the wire spelling of s ("delivered", "notified", "read", "acked").
func (s ReceiptState) String() string {
	if s < ReceiptDelivered || s > ReceiptAcked {
		return "ReceiptState(" + strconv.Itoa(int(s)) + ")"
	}
	return receiptStateNames[s]
}

// Valid reports whether s is one of the four states.
func (s ReceiptState) Valid() bool { return s >= ReceiptDelivered && s <= ReceiptAcked }

// ParseReceiptState reads the wire spelling of a state.
func ParseReceiptState(s string) (ReceiptState, error) {
	for st := ReceiptDelivered; st <= ReceiptAcked; st++ {
		if receiptStateNames[st] == s {
			return st, nil
		}
	}
	return 0, fmt.Errorf("%w: unknown state %q", ErrReceiptInvalid, s)
}

// MarshalText writes the wire spelling.
func (s ReceiptState) MarshalText() ([]byte, error) {
	if !s.Valid() {
		return nil, fmt.Errorf("%w: unknown state %d", ErrReceiptInvalid, int(s))
	}
	return []byte(s.String()), nil
}

// UnmarshalText reads the wire spelling.
func (s *ReceiptState) UnmarshalText(b []byte) error {
	st, err := ParseReceiptState(string(b))
	if err != nil {
		return err
	}
	*s = st
	return nil
}

// Limits of receipt records.
const (
	ReceiptNoteMax = 500 // UTF-16 units of a note; longer notes are cut when signing
	ReceiptDidMax  = 200 // UTF-16 units of a did line; longer lines are cut when signing
	// MaxReceiptRecipientsPerHost bounds the receipt rows one message can grow per paired host.
	MaxReceiptRecipientsPerHost = 200
	// ReceiptBatchMax is the most receipts one LAN POST /v1/receipts carries.
	ReceiptBatchMax = receiptBatchMax
)

var (
	recAgentRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{1,39}$`)
	recHostRE  = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)
	// recISORE is the ISO datetime the receipt schema accepts: a real calendar date, hours and
	// minutes, optional seconds with any fraction, and "Z" (no offset).
	recISORE = regexp.MustCompile(`^(?:(?:\d\d[2468][048]|\d\d[13579][26]|\d\d0[48]|[02468][048]00|[13579][26]00)-02-29|\d{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12]\d|3[01])|(?:0[469]|11)-(?:0[1-9]|[12]\d|30)|(?:02)-(?:0[1-9]|1\d|2[0-8])))T(?:[01]\d|2[0-3]):[0-5]\d(?::[0-5]\d(?:\.\d+)?)?Z$`)
)

// ReceiptRecord is a delivery receipt: the recipient's host says how far message Msg got
// with Recipient ("name@host"). Seq orders receipts of the same state. Note and Did are nil when
// absent (an empty string present on the wire is kept: the signature covers it).
type ReceiptRecord struct {
	V         int          `json:"v"`
	Type      string       `json:"type"`
	Msg       string       `json:"msg"`
	Recipient string       `json:"recipient"`
	State     ReceiptState `json:"state"`
	At        string       `json:"at"`
	Note      *string      `json:"note,omitempty"`
	Did       *string      `json:"did,omitempty"`
	Seq       int64        `json:"seq"`
}

// SignedReceipt is a receipt record with the recipient host's signature over its canonical JSON.
// Its canonical JSON is the relay wire of a receipt item.
type SignedReceipt struct {
	Rec ReceiptRecord `json:"rec"`
	Sig string        `json:"sig"`
}

// ReceiptItemID is the relay item id of a receipt: receipt:<msg>:<recipient>:<seq>.
func ReceiptItemID(msg, recipient string, seq int64) string {
	return "receipt:" + msg + ":" + recipient + ":" + strconv.FormatInt(seq, 10)
}

// ItemID is the relay item id of the record.
func (r ReceiptRecord) ItemID() string { return ReceiptItemID(r.Msg, r.Recipient, r.Seq) }

// Host is the host part of the recipient: the host that signs the receipt.
func (r ReceiptRecord) Host() string {
	_, h, _ := strings.Cut(r.Recipient, "@")
	return h
}

// Agent is the name part of the recipient.
func (r ReceiptRecord) Agent() string {
	n, _, _ := strings.Cut(r.Recipient, "@")
	return n
}

// SigningInput is the canonical JSON of the record: the bytes the signature covers.
func (r ReceiptRecord) SigningInput() ([]byte, error) { return Canonical(r) }

// Validate checks the record against the receipt schema: v 1, type "receipt", msg of 10 to 40
// characters, recipient name@host (name "owner" or an agent name), one of the four states, at an
// ISO-8601 UTC time with "Z", note ≤ 500 and did ≤ 200 characters, seq a positive safe integer.
func (r ReceiptRecord) Validate() error {
	bad := func(field string) error { return fmt.Errorf("%w: %s", ErrReceiptInvalid, field) }
	switch {
	case r.V != 1:
		return bad("v must be 1")
	case r.Type != "receipt":
		return bad(`type must be "receipt"`)
	case utf16Len(r.Msg) < 10 || utf16Len(r.Msg) > 40:
		return bad("msg must have 10 to 40 characters")
	case !validRecipient(r.Recipient):
		return bad("recipient must be name@host")
	case !r.State.Valid():
		return bad("unknown state")
	case !recISORE.MatchString(r.At):
		return bad("at must be an ISO-8601 UTC time")
	case r.Note != nil && utf16Len(*r.Note) > ReceiptNoteMax:
		return bad("note over 500 characters")
	case r.Did != nil && utf16Len(*r.Did) > ReceiptDidMax:
		return bad("did over 200 characters")
	case r.Seq <= 0 || r.Seq > maxSafeInteger:
		return bad("seq must be a positive integer")
	}
	return nil
}

func validRecipient(a string) bool {
	if utf16Len(a) > maxReceiptRecipientLen {
		return false
	}
	parts := strings.Split(a, "@")
	if len(parts) != 2 {
		return false
	}
	return (parts[0] == "owner" || recAgentRE.MatchString(parts[0])) && recHostRE.MatchString(parts[1])
}

// ReceiptInput is what a recipient host knows about one delivery state change.
type ReceiptInput struct {
	Msg   string       // the message id
	Agent string       // the recipient agent on this host ("owner" for the owner)
	State ReceiptState // the new state
	At    string       // when it changed, ISO-8601 UTC (ISOTime)
	Note  string       // optional; cut to ReceiptNoteMax
	Did   string       // optional, used only for ReceiptAcked; cut to ReceiptDidMax
	Seq   int64        // this host's receipt sequence number, positive
}

// SignReceipt builds the receipt for one delivery state change on host and signs it with the
// host's key. A note is kept only when non-empty, a did line only when the state is acked; both are
// cut to their maximum length (never inside a surrogate pair).
func SignReceipt(k SigningKey, host string, in ReceiptInput) (SignedReceipt, error) {
	rec := ReceiptRecord{V: 1, Type: "receipt", Msg: in.Msg, Recipient: in.Agent + "@" + host, State: in.State, At: in.At, Seq: in.Seq}
	if in.Note != "" {
		n := cutUTF16(in.Note, ReceiptNoteMax)
		rec.Note = &n
	}
	if in.State == ReceiptAcked && in.Did != "" {
		d := cutUTF16(in.Did, ReceiptDidMax)
		rec.Did = &d
	}
	if err := rec.Validate(); err != nil {
		return SignedReceipt{}, fmt.Errorf("sign receipt: %w", err)
	}
	in2, err := rec.SigningInput()
	if err != nil {
		return SignedReceipt{}, fmt.Errorf("sign receipt: %w", err)
	}
	return SignedReceipt{Rec: rec, Sig: k.Sign(in2)}, nil
}

// Wire is the canonical JSON of {rec, sig}: the bytes of a relay receipt item.
func (s SignedReceipt) Wire() ([]byte, error) { return Canonical(s) }

// ItemID is the relay item id of the receipt.
func (s SignedReceipt) ItemID() string { return s.Rec.ItemID() }

// Verify reports whether one of keys (a host's current and retired keys) signed the record.
func (s SignedReceipt) Verify(keys ...string) bool {
	in, err := s.Rec.SigningInput()
	if err != nil {
		return false
	}
	for _, k := range keys {
		if Verify(k, in, s.Sig) {
			return true
		}
	}
	return false
}

// receiptFields are the fields a receipt record may carry; any other is refused.
var receiptFields = map[string]bool{"v": true, "type": true, "msg": true, "recipient": true, "state": true, "at": true, "note": true, "did": true, "seq": true}

// parseReceiptRecord reads a record from a generic JSON tree, strictly.
func parseReceiptRecord(v any) (ReceiptRecord, error) {
	m, ok := v.(map[string]any)
	if !ok {
		return ReceiptRecord{}, fmt.Errorf("%w: rec is not an object", ErrReceiptInvalid)
	}
	for k := range m {
		if !receiptFields[k] {
			return ReceiptRecord{}, fmt.Errorf("%w: unknown field %q", ErrReceiptInvalid, k)
		}
	}
	var r ReceiptRecord
	var ok1, ok2, ok3, ok4, ok5 bool
	if isNumber(m, "v", 1) {
		r.V = 1
	}
	r.Type, ok1 = getString(m, "type")
	r.Msg, ok2 = getString(m, "msg")
	r.Recipient, ok3 = getString(m, "recipient")
	r.At, ok4 = getString(m, "at")
	state, ok5 := getString(m, "state")
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 {
		return ReceiptRecord{}, fmt.Errorf("%w: missing or mistyped field", ErrReceiptInvalid)
	}
	st, err := ParseReceiptState(state)
	if err != nil {
		return ReceiptRecord{}, err
	}
	r.State = st
	for _, f := range []struct {
		key string
		dst **string
	}{{"note", &r.Note}, {"did", &r.Did}} {
		if raw, present := m[f.key]; present {
			s, isStr := raw.(string)
			if !isStr {
				return ReceiptRecord{}, fmt.Errorf("%w: %s must be a string", ErrReceiptInvalid, f.key)
			}
			*f.dst = &s
		}
	}
	seq, ok := getSafeInt(m, "seq")
	if !ok {
		return ReceiptRecord{}, fmt.Errorf("%w: seq must be a positive integer", ErrReceiptInvalid)
	}
	r.Seq = seq
	if err := r.Validate(); err != nil {
		return ReceiptRecord{}, err
	}
	return r, nil
}

// ParseReceipt reads a signed receipt {rec, sig} from JSON (a relay wire or one entry of a LAN
// batch). The record is checked strictly against the schema; the signature must be a string of
// at most 200 characters. Fields beside rec and sig are ignored. The signature is not verified.
func ParseReceipt(data []byte) (SignedReceipt, error) {
	v, err := ParseJSON(data)
	if err != nil {
		return SignedReceipt{}, fmt.Errorf("%w: %v", ErrReceiptInvalid, err)
	}
	return parseSignedReceipt(v)
}

func parseSignedReceipt(v any) (SignedReceipt, error) {
	m, ok := v.(map[string]any)
	if !ok {
		return SignedReceipt{}, fmt.Errorf("%w: not an object", ErrReceiptInvalid)
	}
	rec, err := parseReceiptRecord(m["rec"])
	if err != nil {
		return SignedReceipt{}, err
	}
	sig, ok := getString(m, "sig")
	if !ok || utf16Len(sig) > maxReceiptSigLen {
		return SignedReceipt{}, fmt.Errorf("%w: sig must be a short string", ErrReceiptInvalid)
	}
	return SignedReceipt{Rec: rec, Sig: sig}, nil
}

// ReceiptVerdict is the outcome of applying a valid receipt against what is stored.
type ReceiptVerdict int

// Receipt verdicts.
const (
	ReceiptAccepted  ReceiptVerdict = iota + 1 // new information: store it (upsert by msg and recipient)
	ReceiptDuplicate                           // the same state and seq are stored already
	ReceiptStale                               // a higher state, or the same state with a later seq, is stored
)

// String returns "accepted", "duplicate" or "stale".
func (v ReceiptVerdict) String() string {
	switch v {
	case ReceiptAccepted:
		return "accepted"
	case ReceiptDuplicate:
		return "duplicate"
	case ReceiptStale:
		return "stale"
	}
	return "ReceiptVerdict(" + strconv.Itoa(int(v)) + ")"
}

// StoredReceipt is the stored state of one (msg, recipient).
type StoredReceipt struct {
	State ReceiptState
	Seq   int64
}

// DecideReceipt applies rec against the stored row of its (msg, recipient), nil when there is
// none: same state and seq is a duplicate; a lower state, or the same state with a seq not above
// the stored one, is stale; anything else is accepted.
func DecideReceipt(stored *StoredReceipt, rec ReceiptRecord) ReceiptVerdict {
	if stored == nil {
		return ReceiptAccepted
	}
	if stored.State == rec.State && stored.Seq == rec.Seq {
		return ReceiptDuplicate
	}
	if rec.State < stored.State || (rec.State == stored.State && rec.Seq <= stored.Seq) {
		return ReceiptStale
	}
	return ReceiptAccepted
}

// ReceiptBook is what the sending host knows that acceptReceipt needs. The host implements it over
// its store, inside the transaction that then stores an accepted receipt.
type ReceiptBook interface {
	// PeerKeys returns the pinned key and the retired keys of host, or ok false when host is not a
	// paired (approved) peer.
	PeerKeys(host string) (keys []string, ok bool)
	// SentTo reports whether msg is a message this host sent, and whether it routed it to host.
	SentTo(msg, host string) (sent, routed bool)
	// StoredReceipt returns the stored receipt state of (msg, recipient), or nil.
	StoredReceipt(msg, recipient string) *StoredReceipt
	// ReceiptCount returns how many receipt rows are stored for msg from recipients on host.
	ReceiptCount(msg, host string) int
}

// AcceptReceipt applies one signed receipt, as received (JSON bytes), that a paired host sent
// about a message this host sent. hop is the host the LAN request came from, or "" when the receipt
// came through the relay. The checks, in the original's order: strict parse; over the LAN, the
// recipient's host must be hop; the host must be paired; its current or a retired key must have
// signed; the message must be one this host sent and routed to that host; then the stored row
// decides (DecideReceipt), and a first receipt for a new recipient must not exceed
// MaxReceiptRecipientsPerHost. On ReceiptAccepted the caller stores the receipt.
func AcceptReceipt(book ReceiptBook, item []byte, hop string) (SignedReceipt, ReceiptVerdict, error) {
	s, err := ParseReceipt(item)
	if err != nil {
		return SignedReceipt{}, 0, err
	}
	v, err := acceptParsedReceipt(book, s, hop)
	return s, v, err
}

func acceptParsedReceipt(book ReceiptBook, s SignedReceipt, hop string) (ReceiptVerdict, error) {
	host := s.Rec.Host()
	if hop != "" && host != hop {
		return 0, fmt.Errorf("%w: receipt for %s came from %s", ErrReceiptWrongHop, s.Rec.Recipient, hop)
	}
	keys, ok := book.PeerKeys(host)
	if !ok {
		return 0, fmt.Errorf("%w: %s", ErrReceiptNotPaired, host)
	}
	if !s.Verify(keys...) {
		return 0, ErrReceiptSignature
	}
	sent, routed := book.SentTo(s.Rec.Msg, host)
	if !sent {
		return 0, ErrReceiptNotSent
	}
	if !routed {
		return 0, fmt.Errorf("%w: %s", ErrReceiptNotRouted, host)
	}
	stored := book.StoredReceipt(s.Rec.Msg, s.Rec.Recipient)
	if stored == nil && book.ReceiptCount(s.Rec.Msg, host) >= MaxReceiptRecipientsPerHost {
		return 0, ErrReceiptTooMany
	}
	return DecideReceipt(stored, s.Rec), nil
}

// CheckReceiptWire is the relay's check of a pushed receipt item: the wire is a well-formed
// signed receipt, itemID is its receipt id, and senderPub (the pushing host) signed it.
func CheckReceiptWire(itemID string, wire []byte, senderPub string) (SignedReceipt, error) {
	v, err := ParseJSON(wire)
	if err != nil {
		return SignedReceipt{}, ErrReceiptWire
	}
	m, _ := v.(map[string]any)
	rec, err := parseReceiptRecord(m["rec"])
	if err != nil {
		return SignedReceipt{}, fmt.Errorf("%w: %w", ErrBadReceipt, err)
	}
	sig, ok := getString(m, "sig")
	if !ok {
		return SignedReceipt{}, fmt.Errorf("%w: sig must be a string", ErrBadReceipt)
	}
	s := SignedReceipt{Rec: rec, Sig: sig}
	if itemID != rec.ItemID() {
		return SignedReceipt{}, ErrReceiptItemID
	}
	if !s.Verify(senderPub) {
		return SignedReceipt{}, ErrReceiptNotSender
	}
	return s, nil
}

// ReceiptsRequest is the body of the LAN POST /v1/receipts: at most ReceiptBatchMax signed
// receipts, each kept raw so every one is parsed and verified on its own.
type ReceiptsRequest struct {
	Receipts []json.RawMessage `json:"receipts"`
}
