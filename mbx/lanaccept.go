package mbx

import (
	"encoding/json"
	"fmt"
)

// The LAN accept statement (an agentmbx addition; docs/protocol.md: LAN accept statements). A
// host that stores an item a paired peer delivered over the LAN (an envelope, or a delivery
// receipt) answers it with this statement signed by its host key: the sender ends its outbox row
// done only on a statement from the key it pinned for that peer, so that whatever else answers
// at the peer's address (another machine that got the DHCP lease, or someone on purpose) cannot
// make it drop the mail.
//
//	{"v": 1, "type": "lan-accept", "target_pubkey", "sender_pubkey", "item_id", "wire_hash"}
//
// target_pubkey is the receiving host's key (the signer: the row's target), sender_pubkey the
// sending host's key as the receiver pinned it, item_id the row's item id (the message id, or
// "receipt:…" for a receipt) and wire_hash the lowercase hex SHA-256 of the item's exact bytes
// as received. The signature is the target's Ed25519 signature over the statement's canonical
// JSON. The type "lan-accept" is the statement's domain tag: no other record a host or relay key
// signs has it (a relay's is "relay-accept", and it has no target_pubkey).

// LANAcceptType is the type of a LAN accept statement.
const LANAcceptType = "lan-accept"

// LANAccept is a receiving host's signed statement that it stored an item a peer delivered over
// the LAN.
type LANAccept struct {
	V            int    `json:"v"`
	Type         string `json:"type"`
	TargetPubkey string `json:"target_pubkey"`
	SenderPubkey string `json:"sender_pubkey"`
	ItemID       string `json:"item_id"`
	WireHash     string `json:"wire_hash"`
}

// NewLANAccept is the statement of the host target for the item itemID from sender, whose exact
// bytes as received were wire.
func NewLANAccept(targetPub, senderPub, itemID string, wire []byte) LANAccept {
	return LANAccept{V: 1, Type: LANAcceptType, TargetPubkey: targetPub, SenderPubkey: senderPub, ItemID: itemID, WireHash: WireHash(wire)}
}

// SigningInput is the canonical JSON of the statement (the bytes signed, and the bytes a
// receiver sends as the statement).
func (a LANAccept) SigningInput() ([]byte, error) { return Canonical(a) }

// SignLANAccept returns the statement as sent (its canonical JSON) and the signature of key over
// it. key must be the statement's target.
func SignLANAccept(key SigningKey, a LANAccept) (json.RawMessage, string, error) {
	in, err := a.SigningInput()
	if err != nil {
		return nil, "", fmt.Errorf("sign LAN accept: %w", err)
	}
	return in, key.Sign(in), nil
}

// ValidLANAccept is the sender's check of a LAN answer's statement for one item: a lan-accept
// naming the pinned key of the peer as target, this host's key as sender, the row's item id and
// the hash of the row's wire bytes, signed by the pinned key over its canonical JSON as
// received. A missing statement or signature is ErrLANAcceptMissing (a peer that cannot sign:
// 0.5.x); anything else that fails wraps ErrBadLANAccept.
func ValidLANAccept(stmt json.RawMessage, sig, pinnedPeer, ownPub, itemID, wireHash string) error {
	if len(stmt) == 0 && sig == "" {
		return ErrLANAcceptMissing
	}
	m, ok := parseObject(stmt)
	if !ok || sig == "" {
		return ErrLANAcceptMalformed
	}
	typ, _ := getString(m, "type")
	target, _ := getString(m, "target_pubkey")
	sender, _ := getString(m, "sender_pubkey")
	item, _ := getString(m, "item_id")
	hash, _ := getString(m, "wire_hash")
	switch {
	case typ != LANAcceptType || !isNumber(m, "v", 1):
		return ErrLANAcceptMalformed
	case target != pinnedPeer || target == "":
		return ErrLANAcceptTarget
	case sender != ownPub || sender == "":
		return ErrLANAcceptSender
	case item != itemID:
		return ErrLANAcceptItem
	case hash != wireHash:
		return ErrLANAcceptWireHash
	}
	in, err := Canonical(m)
	if err != nil || !Verify(pinnedPeer, in, sig) {
		return ErrLANAcceptSignature
	}
	return nil
}
