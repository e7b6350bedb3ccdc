package mbx

import "errors"

// reason is a refusal of a signed record: its text is the original implementation's reason, word
// for word where there was one, and it wraps the error of its record family, so a caller can test
// either the family (errors.Is(err, ErrBadEncAd)) or the exact reason (errors.Is(err, ErrEncAdExpired)).
type reason struct {
	family error
	text   string
}

func (r *reason) Error() string { return r.text }
func (r *reason) Unwrap() error { return r.family }

func newReason(family error, text string) error { return &reason{family: family, text: text} }

// Families of the signed records. Every refusal below wraps exactly one of them.
var (
	// ErrBadReceipt is the family of delivery receipt refusals.
	ErrBadReceipt = errors.New("bad receipt")
	// ErrBadEncAd is the family of enc-key advertisement refusals.
	ErrBadEncAd = errors.New("enc-key ad refused")
	// ErrBadRotation is the family of host key rotation refusals.
	ErrBadRotation = errors.New("bad rotation")
	// ErrBadSenderList is the family of sender allowlist refusals.
	ErrBadSenderList = errors.New("sender list refused")
	// ErrBadAccept is the family of relay accept statement refusals (the sender's check).
	ErrBadAccept = errors.New("bad accept statement")
	// ErrBadLANAccept is the family of LAN accept statement refusals (the sender's check).
	ErrBadLANAccept = errors.New("bad LAN accept statement")
	// ErrBadExpiryNotice is the family of expiry notice refusals.
	ErrBadExpiryNotice = errors.New("bad expiry notice")
	// ErrBadEnrolment is the family of enrolment refusals.
	ErrBadEnrolment = errors.New("enrolment refused")
	// ErrBadPairing is the family of pairing code and token errors.
	ErrBadPairing = errors.New("bad pairing input")
)

// Delivery receipts. The verdicts of acceptReceipt that are not refusals (duplicate, stale)
// are ReceiptVerdict values, not errors.
var (
	// ErrReceiptInvalid is returned for a record that fails the strict schema (unknown or missing
	// fields, a bad recipient, state, time or seq) or a signature that is not a short string.
	ErrReceiptInvalid = newReason(ErrBadReceipt, "invalid receipt")
	// ErrReceiptWire is returned by the relay's check for wire bytes that are not JSON.
	ErrReceiptWire = newReason(ErrBadReceipt, "bad wire")
	// ErrReceiptWrongHop is returned when a receipt arrives over the LAN from a host other than
	// the recipient's.
	ErrReceiptWrongHop = newReason(ErrBadReceipt, "receipt did not come from the recipient's host")
	// ErrReceiptNotPaired is returned when the recipient's host is not a paired host.
	ErrReceiptNotPaired = newReason(ErrBadReceipt, "not a paired host")
	// ErrReceiptSignature is returned when no current or retired key of the recipient's host
	// signed the record.
	ErrReceiptSignature = newReason(ErrBadReceipt, "bad signature")
	// ErrReceiptNotSent is returned for a receipt about a message this host did not send.
	ErrReceiptNotSent = newReason(ErrBadReceipt, "not a message this host sent")
	// ErrReceiptNotRouted is returned for a receipt about a message this host sent, but not to the
	// host that signed the receipt.
	ErrReceiptNotRouted = newReason(ErrBadReceipt, "not a message this host routed to that host")
	// ErrReceiptTooMany is returned when a new recipient would exceed MaxReceiptRecipientsPerHost.
	ErrReceiptTooMany = newReason(ErrBadReceipt, "too many recipients for one message")
	// ErrReceiptItemID is returned by the relay's check when the item id is not
	// receipt:<msg>:<recipient>:<seq> of the record.
	ErrReceiptItemID = newReason(ErrBadReceipt, "item id is not the receipt id")
	// ErrReceiptNotSender is returned by the relay's check when the pushing host did not sign the
	// record.
	ErrReceiptNotSender = newReason(ErrBadReceipt, "receipt is not signed by the sending host")
)

// Enc-key advertisements. The texts of checkEncAd are kept exactly; the relay prefixes them with
// "enc-key ad refused: ".
var (
	// ErrEncAdUnsigned is returned when the signature is missing or empty.
	ErrEncAdUnsigned = newReason(ErrBadEncAd, "unsigned")
	// ErrEncAdMalformed is returned for a record of the wrong shape, an enc_pub that is not a
	// 32-byte key in padded standard base64, or iat/exp that do not parse as times.
	ErrEncAdMalformed = newReason(ErrBadEncAd, "malformed")
	// ErrEncAdWrongPeer is returned when the ad names another host key or host name than expected.
	ErrEncAdWrongPeer = newReason(ErrBadEncAd, "wrong peer")
	// ErrEncAdSignature is returned when the expected host key did not sign the record as received.
	ErrEncAdSignature = newReason(ErrBadEncAd, "bad signature")
	// ErrEncAdNotYetValid is returned when iat is more than EncAdSkew ahead of now.
	ErrEncAdNotYetValid = newReason(ErrBadEncAd, "not yet valid")
	// ErrEncAdExpired is returned when exp is at or before now.
	ErrEncAdExpired = newReason(ErrBadEncAd, "expired")
	// ErrEncAdLifetime is returned when exp - iat exceeds EncAdMaxTTL.
	ErrEncAdLifetime = newReason(ErrBadEncAd, "lifetime over the maximum")
	// ErrEncAdUnexpiring is returned by EncFromRelayAnswer for a v1 ad served by a relay: it has no
	// expiry, so a relay could replay it forever.
	ErrEncAdUnexpiring = newReason(ErrBadEncAd, "unexpiring v1 advertisement (the peer's AgentMBX predates signed expiring ads, or the relay withheld the current one)")
	// ErrEncAdTampered is returned by EncFromRelayAnswer when the relay serves an enc_pub beside
	// the signed ad that is not the ad's key.
	ErrEncAdTampered = newReason(ErrBadEncAd, "tampered: the served key differs from the signed advertisement")
	// ErrEncAdRolledBack is returned by NewestEncAd for an ad older than the newest one accepted
	// from that peer that names another key.
	ErrEncAdRolledBack = newReason(ErrBadEncAd, "rolled back: an older advertisement names another key")
	// ErrEncAdHostMismatch is returned by the relay's v1 check when the ad names another host than
	// the enrolment of the publishing key.
	ErrEncAdHostMismatch = newReason(ErrBadEncAd, "host mismatch")
	// ErrEncAdV1Signature is returned when a v1 ad's signature does not verify.
	ErrEncAdV1Signature = newReason(ErrBadEncAd, "bad enc-key signature")
)

// Host key rotations.
var (
	// ErrRotationMalformed is returned for a record of the wrong shape.
	ErrRotationMalformed = newReason(ErrBadRotation, "not a rotation record")
	// ErrRotationNotPinned is returned when old_pub is not the key the checker pinned.
	ErrRotationNotPinned = newReason(ErrBadRotation, "rotation does not start from the pinned host key")
	// ErrRotationSameKey is returned when new_pub equals old_pub.
	ErrRotationSameKey = newReason(ErrBadRotation, "rotation keeps the same host key")
	// ErrRotationOldSig is returned when old_sig does not verify with old_pub.
	ErrRotationOldSig = newReason(ErrBadRotation, "rotation is not signed by the pinned host key")
	// ErrRotationNewSig is returned when new_sig does not verify with new_pub.
	ErrRotationNewSig = newReason(ErrBadRotation, "rotation is not signed by the new host key")
	// ErrRotationEncKey is returned when new_enc_pub is not a 32-byte key (a check the original
	// does not make; both keys signed such a record, but pinning garbage helps nobody).
	ErrRotationEncKey = newReason(ErrBadRotation, "rotation names a malformed enc key")
	// ErrRotationHost is returned by the relay's check when the record names another host than the
	// enrolment, or a new key that is not a 32-byte key.
	ErrRotationHost = newReason(ErrBadRotation, "rotation names another host")
)

// Sender allowlists.
var (
	// ErrSendersMalformed is returned for a list of the wrong shape, for another target, with more
	// than MaxSenders entries or an entry that is not a key.
	ErrSendersMalformed = newReason(ErrBadSenderList, "bad sender list")
	// ErrSendersFuture is returned when iat is more than five minutes ahead of the relay's clock.
	ErrSendersFuture = newReason(ErrBadSenderList, "sender list iat is in the future")
	// ErrSendersSignature is returned when the target's key did not sign the list as received.
	ErrSendersSignature = newReason(ErrBadSenderList, "sender list is not signed by the target")
	// ErrSendersStale is returned when the stored list's iat is the same or later.
	ErrSendersStale = newReason(ErrBadSenderList, "a newer sender list is already stored")
)

// Relay accept statements (the sender's check). The original only says "not valid"; these say why.
var (
	// ErrAcceptStatus is returned when the item's status is neither accepted nor duplicate, or the
	// result carries no statement or no signature.
	ErrAcceptStatus = newReason(ErrBadAccept, "item was not accepted")
	// ErrAcceptMalformed is returned for a statement of the wrong shape or type.
	ErrAcceptMalformed = newReason(ErrBadAccept, "not a relay accept statement")
	// ErrAcceptRelayKey is returned when the statement names another relay key than the pinned one.
	ErrAcceptRelayKey = newReason(ErrBadAccept, "accept names another relay key")
	// ErrAcceptSender is returned when the statement names another sender key.
	ErrAcceptSender = newReason(ErrBadAccept, "accept names another sender")
	// ErrAcceptItem is returned when the statement is for another item id.
	ErrAcceptItem = newReason(ErrBadAccept, "accept is for another item")
	// ErrAcceptTarget is returned when the statement has no entry for the expected target.
	ErrAcceptTarget = newReason(ErrBadAccept, "accept has no entry for the target")
	// ErrAcceptWireHash is returned when the target's wire_hash is not the hash of the bytes sent.
	ErrAcceptWireHash = newReason(ErrBadAccept, "accept covers other wire bytes")
	// ErrAcceptSeq is returned when the target's seq is not a safe integer.
	ErrAcceptSeq = newReason(ErrBadAccept, "accept seq is not a safe integer")
	// ErrAcceptSignature is returned when the pinned relay key did not sign the statement.
	ErrAcceptSignature = newReason(ErrBadAccept, "accept is not signed by the pinned relay key")
)

// LAN accept statements (the sender's check, ValidLANAccept).
var (
	// ErrLANAcceptMissing is returned when a LAN answer carries no statement and no signature for
	// an item it says it stored: a peer that cannot sign (0.5.x), or something else answering at
	// its address. It is not in the ErrBadLANAccept family.
	ErrLANAcceptMissing = errors.New("the answer carries no signed LAN accept statement")
	// ErrLANAcceptMalformed is returned for a statement of the wrong shape or type, or without a
	// signature.
	ErrLANAcceptMalformed = newReason(ErrBadLANAccept, "not a LAN accept statement")
	// ErrLANAcceptTarget is returned when the statement names another target key than the pinned
	// one.
	ErrLANAcceptTarget = newReason(ErrBadLANAccept, "LAN accept names another host key")
	// ErrLANAcceptSender is returned when the statement names another sender key.
	ErrLANAcceptSender = newReason(ErrBadLANAccept, "LAN accept names another sender")
	// ErrLANAcceptItem is returned when the statement is for another item id.
	ErrLANAcceptItem = newReason(ErrBadLANAccept, "LAN accept is for another item")
	// ErrLANAcceptWireHash is returned when wire_hash is not the hash of the bytes sent.
	ErrLANAcceptWireHash = newReason(ErrBadLANAccept, "LAN accept covers other wire bytes")
	// ErrLANAcceptSignature is returned when the pinned key did not sign the statement.
	ErrLANAcceptSignature = newReason(ErrBadLANAccept, "LAN accept is not signed by the pinned host key")
)

// Expiry notices. The original answers every one of these with "bad expiry notice".
var (
	// ErrExpirySender is returned when the pulled item was not pushed by the pinned relay key.
	ErrExpirySender = newReason(ErrBadExpiryNotice, "expiry notice not queued by the pinned relay key")
	// ErrExpiryMalformed is returned for wire bytes that are not a v1 relay-expired notice.
	ErrExpiryMalformed = newReason(ErrBadExpiryNotice, "not an expiry notice")
	// ErrExpirySignature is returned when the pinned relay key did not sign the notice.
	ErrExpirySignature = newReason(ErrBadExpiryNotice, "expiry notice is not signed by the pinned relay key")
)

// Enrolment.
var (
	// ErrEnrolHostName is returned by CheckChallengeRequest for a host name outside the host name
	// rule.
	ErrEnrolHostName = newReason(ErrBadEnrolment, "bad host name")
	// ErrEnrolHostKey is returned by CheckChallengeRequest for a key that is not 32 bytes.
	ErrEnrolHostKey = newReason(ErrBadEnrolment, "bad host key")
	// ErrEnrolFields is returned for an enrolment whose host, key or owner_fp is malformed.
	ErrEnrolFields = newReason(ErrBadEnrolment, "bad enrolment fields")
	// ErrEnrolNoChallenge is returned when no challenge is pending for the key.
	ErrEnrolNoChallenge = newReason(ErrBadEnrolment, "no pending enrolment challenge")
	// ErrEnrolSignature is returned when the signature does not cover the pending challenge, the
	// host, the key and the owner_fp.
	ErrEnrolSignature = newReason(ErrBadEnrolment, "bad enrolment signature")
)

// Pairing.
var (
	// ErrPairToken is returned for a pairing token that is not 12 Crockford base32 characters.
	ErrPairToken = newReason(ErrBadPairing, "malformed pairing token (expected XXXX-XXXX-XXXX)")
	// ErrPairMACLabel is returned for a MAC label other than "join" or "accept".
	ErrPairMACLabel = newReason(ErrBadPairing, `pairing MAC label must be "join" or "accept"`)
	// ErrPairTokenKey is returned for a token key that is not 64 hex digits.
	ErrPairTokenKey = newReason(ErrBadPairing, "pairing token key must be 64 hex digits")
)
