package quarantine

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/agentmbx/agentmbx/mbx"
)

// Limits of an entry. Fields that take part in a bbolt key (relay, epoch, an unpaired sender) are
// bounded tightly; the others only loosely, because they come from the relay and a refusal here
// would stall the receiver on one bad item.
const (
	MaxRelayLen   = 2048     // the relay's identifier (normally its base URL)
	MaxEpochLen   = 256      // the relay's epoch
	MaxFieldLen   = 64 << 10 // item id, kind, sender, reason: longer reasons are cut
	MaxWireLen    = 64 << 20 // the wire bytes
	maxUnpairedID = 256      // the sender key of a CauseUnpaired entry (it is indexed)
)

// Entry is one quarantined relay item.
type Entry struct {
	// ID identifies the entry: lowercase hex SHA-256 of (relay, sender, item id, wire hash).
	// Put computes it.
	ID string `json:"id"`
	// Relay is the relay the item was pulled from (the caller's identifier, normally its URL).
	Relay string `json:"relay"`
	// Epoch and Seq are the item's position at that relay.
	Epoch string `json:"epoch"`
	Seq   int64  `json:"seq"`
	// ItemID, Kind and Sender are the item's fields as the relay served them (Sender is the
	// pushing host's base64 key, or the relay's key for an expiry notice).
	ItemID string `json:"item_id"`
	Kind   string `json:"kind"`
	Sender string `json:"sender_pubkey"`
	// Cause classifies the rejection; Reason says it in words.
	Cause  Cause  `json:"cause"`
	Reason string `json:"reason"`
	// Wire holds the exact bytes the relay served. Lists leave it out unless asked for it.
	Wire []byte `json:"-"`
	// WireHash is lowercase hex SHA-256 of Wire; Bytes its length. Put computes both.
	WireHash string `json:"wire_hash"`
	Bytes    int    `json:"bytes"`
	// At is when the item was first quarantined (Put sets it from the clock when zero).
	At time.Time `json:"at"`
	// Releases counts how often the entry was released for reprocessing and put back.
	Releases int `json:"releases,omitempty"`
}

// record is the stored form of an Entry.
type record struct {
	Relay    string `json:"relay"`
	Epoch    string `json:"epoch"`
	Seq      int64  `json:"seq"`
	ItemID   string `json:"item_id"`
	Kind     string `json:"kind"`
	Sender   string `json:"sender"`
	Cause    Cause  `json:"cause"`
	Reason   string `json:"reason"`
	Wire     []byte `json:"wire"`
	WireHash string `json:"wire_hash"`
	At       int64  `json:"at_ns"`
	Releases int    `json:"releases,omitempty"`
}

func (e *Entry) record() record {
	return record{
		Relay: e.Relay, Epoch: e.Epoch, Seq: e.Seq, ItemID: e.ItemID, Kind: e.Kind, Sender: e.Sender,
		Cause: e.Cause, Reason: e.Reason, Wire: e.Wire, WireHash: e.WireHash, At: e.At.UnixNano(),
		Releases: e.Releases,
	}
}

func decodeEntry(id, v []byte, withWire bool) (Entry, error) {
	var r record
	if err := json.Unmarshal(v, &r); err != nil {
		return Entry{}, fmt.Errorf("%w: entry %x: %v", ErrCorrupt, id, err)
	}
	e := Entry{
		ID: hex.EncodeToString(id), Relay: r.Relay, Epoch: r.Epoch, Seq: r.Seq, ItemID: r.ItemID,
		Kind: r.Kind, Sender: r.Sender, Cause: r.Cause, Reason: r.Reason, WireHash: r.WireHash,
		Bytes: len(r.Wire), At: time.Unix(0, r.At).UTC(), Releases: r.Releases,
	}
	if withWire {
		e.Wire = r.Wire
	}
	return e, nil
}

// check validates e and fills in what Put computes. It never fails on the relay-supplied fields
// other than by size.
func (e *Entry) check(now time.Time) error {
	switch {
	case e.Relay == "" || len(e.Relay) > MaxRelayLen:
		return fmt.Errorf("%w: relay must be 1..%d bytes", ErrInvalid, MaxRelayLen)
	case e.Epoch == "" || len(e.Epoch) > MaxEpochLen:
		return fmt.Errorf("%w: epoch must be 1..%d bytes", ErrInvalid, MaxEpochLen)
	case e.Seq <= 0:
		return fmt.Errorf("%w: seq %d is not positive", ErrInvalid, e.Seq)
	case !e.Cause.Valid():
		return fmt.Errorf("%w: cause %d", ErrInvalid, uint8(e.Cause))
	case len(e.ItemID) > MaxFieldLen || len(e.Kind) > MaxFieldLen || len(e.Sender) > MaxFieldLen:
		return fmt.Errorf("%w: item id, kind or sender over %d bytes", ErrInvalid, MaxFieldLen)
	case e.Cause == CauseUnpaired && (e.Sender == "" || len(e.Sender) > maxUnpairedID):
		return fmt.Errorf("%w: an unpaired entry needs a sender key of 1..%d bytes", ErrInvalid, maxUnpairedID)
	case len(e.Wire) > MaxWireLen:
		return fmt.Errorf("%w: wire of %d bytes is over %d", ErrInvalid, len(e.Wire), MaxWireLen)
	case e.Releases < 0:
		return fmt.Errorf("%w: negative releases", ErrInvalid)
	}
	if len(e.Reason) > MaxFieldLen {
		cut := MaxFieldLen
		for cut > 0 && !utf8.RuneStart(e.Reason[cut]) {
			cut--
		}
		e.Reason = e.Reason[:cut]
	}
	if e.At.IsZero() {
		e.At = now
	}
	e.At = e.At.UTC()
	e.WireHash = mbx.SHA256Hex(e.Wire)
	e.Bytes = len(e.Wire)
	id := identity(e.Relay, e.Sender, e.ItemID, e.WireHash)
	e.ID = hex.EncodeToString(id)
	return nil
}

// identity is the 32-byte identity of an item at a relay: the same item pulled again (after an
// epoch change or a rewind) has the same identity.
func identity(relay, sender, itemID, wireHash string) []byte {
	h := sha256.New()
	for _, s := range []string{relay, sender, itemID, wireHash} {
		var n [4]byte
		binary.BigEndian.PutUint32(n[:], uint32(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	return h.Sum(nil)
}

// appendLP appends s with a 2-byte big-endian length prefix (every keyed string is < 64 KiB).
func appendLP(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(s)))
	return append(b, s...)
}

// itemKey is the key of an entry in the items bucket: relay, epoch, seq, identity. Entries of one
// relay and epoch iterate in seq order.
func itemKey(relay, epoch string, seq int64, id []byte) []byte {
	k := make([]byte, 0, 4+len(relay)+len(epoch)+8+len(id))
	k = appendLP(k, relay)
	k = appendLP(k, epoch)
	k = binary.BigEndian.AppendUint64(k, uint64(seq))
	return append(k, id...)
}

// idOfItemKey returns the identity at the end of an items key.
func idOfItemKey(k []byte) []byte {
	if len(k) < sha256.Size {
		return nil
	}
	return k[len(k)-sha256.Size:]
}

// parseID reads an entry ID.
func parseID(s string) ([]byte, error) {
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != sha256.Size {
		return nil, fmt.Errorf("%w: entry id must be 64 hex digits", ErrInvalid)
	}
	return b, nil
}
