package relayserver

import "time"

// Kind is the kind of a queued item.
type Kind string

// Item kinds.
const (
	// KindEnvelope is a sealed envelope v3, wire = the sender's exact JSON bytes.
	KindEnvelope Kind = "envelope"
	// KindReceipt is a delivery receipt, wire = canonical({rec, sig}).
	KindReceipt Kind = "receipt"
	// KindExpired is a relay expiry notice queued for a sender (docs/design.md: Retention and
	// expiry).
	KindExpired Kind = "expired"
)

// String returns the wire spelling of k.
func (k Kind) String() string { return string(k) }

// Valid reports whether k is a kind a host may push (expired notices come from the relay only).
func (k Kind) Valid() bool { return k == KindEnvelope || k == KindReceipt }

// Enrolment is one host key known to the relay. Hosts are identified by key; the name is a label.
type Enrolment struct {
	HostPubkey string
	HostName   string
	// OwnerFP is the host's own, unproven claim about its owner. It decides nothing.
	OwnerFP string
	// Account and Org are what the enrolment authority proved ("" for the host-key challenge).
	Account string
	Org     string
	// ClientID is the client_id an account token proved ("" for none); the deny list matches it.
	// A re-enrolment that proves none keeps it.
	ClientID string
	// AuthorizedBy names the authority that admitted the key; AuthorityRank orders authorities
	// so a weaker one never overwrites what a stronger one recorded.
	AuthorizedBy  string
	AuthorityRank int
	EnrolledAt    time.Time
	// RevokedAt is zero for a live enrolment. Nothing ever clears it.
	RevokedAt time.Time
	// DeniedAt is when the operator's deny list revoked the enrolment (zero: it did not). The
	// host's hops are refused until it enrols again, which clears it.
	DeniedAt time.Time
	// AuthUntil is when what the authority proved ends: an account token's exp (zero: never, as
	// for the host-key challenge). Past it the enrolment has host-key rights (Rights).
	AuthUntil time.Time
}

// Live reports whether the enrolment is not revoked.
func (e Enrolment) Live() bool { return e.RevokedAt.IsZero() }

// AuthExpired reports whether what the enrolment's authority proved has ended at now.
func (e Enrolment) AuthExpired(now time.Time) bool {
	return !e.AuthUntil.IsZero() && !now.Before(e.AuthUntil)
}

// Rights is the enrolment as it counts at now: once its authority's proof has expired, the
// rights of the host-key challenge (no account, org or rank; a name outside any account's
// namespace for lookups). The client_id stays, for the deny list.
func (e Enrolment) Rights(now time.Time) Enrolment {
	if e.AuthExpired(now) {
		e.Account, e.Org = "", ""
		e.AuthorizedBy, e.AuthorityRank = HostKeyAuthority{}.Name(), HostKeyAuthority{}.Rank()
	}
	return e
}

// EncAd is what a host published about its enc key: the v1 ad (unexpiring, signature over
// {v:1, host, enc_pub}) and/or the v2 ad (expiring, kept as the JSON received). Both, when
// present, name the same EncPub.
type EncAd struct {
	HostPubkey string
	EncPub     string
	// V1Sig is the signature of the v1 ad, "" when the host published none for EncPub.
	V1Sig string
	// Ad is the v2 ad exactly as received (nil when none); AdSig its signature.
	Ad    []byte
	AdSig string
	At    time.Time
}

// SenderList is a target's published allowlist of sender keys.
type SenderList struct {
	TargetPubkey string
	Senders      []string
	IAT          time.Time
	// Record is the JSON of the signed list as received; Sig the target's signature over it.
	Record []byte
	Sig    string
}

// Item is one unit queued for one target.
type Item struct {
	Target     string
	Seq        int64
	Kind       Kind
	ItemID     string
	Sender     string
	Wire       []byte
	WireHash   string
	AcceptedAt time.Time
	ExpiresAt  time.Time
}

// Dedup is the record that (Sender, ItemID, Target) was accepted with WireHash at Seq.
type Dedup struct {
	Sender     string
	ItemID     string
	Target     string
	WireHash   string
	Seq        int64
	AcceptedAt time.Time
}

// Counts is a number of queued items and their wire bytes.
type Counts struct {
	Items int64
	Bytes int64
}

// Usage is what a target's queue holds: in total and from one sender.
type Usage struct {
	Target Counts
	Sender Counts
}

// Head is a target's queue position.
type Head struct {
	// HeadSeq is the last seq allocated for the target (0 when none ever was).
	HeadSeq int64
	// AckedThrough is the highest seq the target acknowledged.
	AckedThrough int64
}

// Page is one pull answer.
type Page struct {
	Head
	Items []Item
	More  bool
}

// AckResult is what an ack did.
type AckResult struct {
	Head
	Deleted int64
}

// Rotation is a verified host key rotation to apply to the store.
type Rotation struct {
	OldPubkey string
	NewPubkey string
	HostName  string
	At        time.Time
}

// RotateResult says what a rotation moved.
type RotateResult struct {
	MovedItems int64
}

// Meta is the identity of a store.
type Meta struct {
	Epoch         string
	RelayPubkey   string
	SchemaVersion int
	// Heartbeat is the last recorded heartbeat (zero when none).
	Heartbeat time.Time
	// RestoredAt and RestoredFrom say when the store was restored from a backup, and from which
	// file (zero and "" when it never was).
	RestoredAt   time.Time
	RestoredFrom string
}

// Admission is what the relay checks before it inserts an item of a sender for a target
// (Tx.Admission).
type Admission struct {
	// Duplicate reports that (sender, item id, target) is stored already; Dedup is its row.
	Duplicate bool
	Dedup     Dedup
	// Enrolled reports that the target key is known; Target is its enrolment.
	Enrolled bool
	Target   Enrolment
	// Allowed reports that the target accepts the sender: it published no allowlist, or the
	// sender is on it.
	Allowed bool
	// Usage is what the target's queue holds, in total and from the sender.
	Usage Usage
	// Account is what the queues of all live hosts of the target's proven account hold (zero
	// when the target proved none).
	Account Counts
	// SenderDedup counts the dedup rows the sender holds, for all targets (its tombstones
	// included): what Options.MaxSenderDedup caps.
	SenderDedup int64
}
