package mbx

import (
	"encoding/json"
	"math"
	"strconv"
	"time"
)

// Default limits of a 0.5.x relay. A relay announces its own values in GET /v2/relay/info.
const (
	DefaultMaxItemBytes   = 512 * 1024       // bytes of one item's wire (two sealed 256 KiB bodies)
	DefaultMaxBatch       = 200              // items per push
	DefaultMaxPull        = 500              // items per pull page
	DefaultMaxPullBytes   = 8 * 1024 * 1024  // wire bytes per pull page (always at least one item)
	DefaultMaxTargets     = 64               // targets per item
	DefaultRetentionDays  = 14               // days an item waits for its target
	DefaultMaxQueueItems  = 10_000           // per target key
	DefaultMaxQueueBytes  = 50 * 1024 * 1024 // per target key
	DefaultMaxSenderItems = 2_000            // per sender key per target key
	DefaultMaxSenderBytes = 20 * 1024 * 1024 // per sender key per target key
	DefaultMaxOwnerItems  = 10_000           // per proven account
	DefaultMaxOwnerBytes  = 50 * 1024 * 1024 // per proven account
)

// Other bounds and timings of a 0.5.x relay, and the default ports.
const (
	RelayMaxBody         = 8 * 1024 * 1024 // request body cap, checked while streaming (413)
	RelaySmallBodyMax    = 8 * 1024        // challenge, enrol and rotate bodies
	EnrolCallsPerMinute  = 30              // challenge/enrol/rotate calls per client address
	PushesPerMinute      = 120             // pushes per sender key
	MaxEnrolments        = 100_000         // live enrolments of one relay
	MaxPendingChallenges = 10_000          // 0.5.x's cap of open challenges (relayserver's are stateless)
	ChallengeTTL         = 5 * time.Minute // lifetime of an enrolment challenge
	MaxEnrolmentsPerName = 16              // live enrolments of one name before v1 treats it as ambiguous
	MaxItemIDLen         = 300             // UTF-16 units of an item id
	DedupGraceDays       = 7               // dedup rows outlive retention by this much
	RelayHeartbeat       = 30 * time.Second
	RelayHeartbeatStale  = 10 * time.Minute // a stored heartbeat older than this rotates the epoch at start
	RelaySweepInterval   = 10 * time.Minute
	RelayDeadlineGrace   = 24 * time.Hour // sender-side grace after retention before "unconfirmed"
	DefaultRelayPort     = 7374
	DefaultHostPort      = 7373
)

// Bounds of the record parsers.
const (
	maxSafeInteger         = 1<<53 - 1
	relaySkew              = 5 * time.Minute
	receiptBatchMax        = 200
	maxRecordHostLen       = 255
	maxRecordTimeLen       = 40
	maxReceiptSigLen       = 200
	maxReceiptRecipientLen = 104
)

// Limits is the limits object of GET /v2/relay/info.
type Limits struct {
	MaxItemBytes   int64 `json:"max_item_bytes"`
	MaxBatch       int   `json:"max_batch"`
	MaxPull        int   `json:"max_pull"`
	MaxPullBytes   int64 `json:"max_pull_bytes"`
	MaxTargets     int   `json:"max_targets"`
	RetentionDays  int   `json:"retention_days"`
	MaxQueueItems  int64 `json:"max_queue_items"`
	MaxQueueBytes  int64 `json:"max_queue_bytes"`
	MaxSenderItems int64 `json:"max_sender_items"`
	MaxSenderBytes int64 `json:"max_sender_bytes"`
	MaxOwnerItems  int64 `json:"max_owner_items"`
	MaxOwnerBytes  int64 `json:"max_owner_bytes"`
	// PushesPerMinute is an agentmbx addition: the push requests a sender key may make a minute
	// (absent from 0.5.x relays, which allow PushesPerMinute; hosts then assume that).
	PushesPerMinute int `json:"pushes_per_minute,omitempty"`
}

// DefaultLimits returns the limits of a 0.5.x relay.
func DefaultLimits() Limits {
	return Limits{
		MaxItemBytes: DefaultMaxItemBytes, MaxBatch: DefaultMaxBatch, MaxPull: DefaultMaxPull,
		MaxPullBytes: DefaultMaxPullBytes, MaxTargets: DefaultMaxTargets, RetentionDays: DefaultRetentionDays,
		MaxQueueItems: DefaultMaxQueueItems, MaxQueueBytes: DefaultMaxQueueBytes,
		MaxSenderItems: DefaultMaxSenderItems, MaxSenderBytes: DefaultMaxSenderBytes,
		MaxOwnerItems: DefaultMaxOwnerItems, MaxOwnerBytes: DefaultMaxOwnerBytes,
	}
}

// Retention is RetentionDays as a duration.
func (l Limits) Retention() time.Duration { return time.Duration(l.RetentionDays) * 24 * time.Hour }

// InfoResponse is the body of GET /v2/relay/info. You is present only for a request with a valid
// hop. A 404 from this endpoint means the relay speaks v1 only.
type InfoResponse struct {
	V           int         `json:"v"`
	RelayPubkey string      `json:"relay_pubkey"`
	Epoch       string      `json:"epoch"`
	Version     string      `json:"version"`
	Limits      Limits      `json:"limits"`
	You         *InfoCaller `json:"you,omitempty"`
}

// InfoCaller is the caller's own queue position in an InfoResponse.
type InfoCaller struct {
	Host         string `json:"host"`
	Pubkey       string `json:"pubkey"`
	HeadSeq      int64  `json:"head_seq"`
	AckedThrough int64  `json:"acked_through"`
	// EncAd summarises the enc-key ads the relay holds for the caller, in the 0.5.x shape; null
	// when it holds none.
	EncAd *InfoEncAd `json:"enc_ad"`
	// EncAdServed reports, on a decoded answer, whether the relay said anything about the ads
	// (enc_ad present, null included): relays older than 0.5.5 leave it out, and then nothing
	// can be concluded from its absence. Never sent.
	EncAdServed bool `json:"-"`
	// Account is the account an authority proved at the caller's enrolment (an account token);
	// absent for a host-key enrolment. An addition of this implementation.
	Account string `json:"account,omitempty"`
}

// UnmarshalJSON decodes the you block and notes whether enc_ad was served (EncAdServed).
func (c *InfoCaller) UnmarshalJSON(b []byte) error {
	type plain InfoCaller
	var p plain
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	var probe struct {
		EncAd json.RawMessage `json:"enc_ad"`
	}
	if err := json.Unmarshal(b, &probe); err != nil {
		return err
	}
	p.EncAdServed = probe.EncAd != nil
	*c = InfoCaller(p)
	return nil
}

// InfoEncAd is you.enc_ad of GET /v2/relay/info, exactly as 0.5.x serves and reads it
// (docs/protocol.md): EncPub is the enc key named by the caller's v2 ad and Exp that ad's
// expiry (both null when the relay holds no v2 ad); V1 is the enc key named by the caller's v1
// ad (null when it holds none). V1 is a key, not a flag: a 0.5.x client compares it with its own
// enc key and republishes its v1 ad when they differ.
type InfoEncAd struct {
	EncPub *string `json:"enc_pub"`
	Exp    *string `json:"exp"`
	V1     *string `json:"v1"`
}

// UnmarshalJSON reads each field as a string or null. The summary is advisory (a client that
// cannot read it republishes on its own schedule), so a value of another type reads as null
// rather than failing the whole info answer: agentmbx relays before this fix served v1 as a
// boolean.
func (a *InfoEncAd) UnmarshalJSON(b []byte) error {
	var raw struct {
		EncPub json.RawMessage `json:"enc_pub"`
		Exp    json.RawMessage `json:"exp"`
		V1     json.RawMessage `json:"v1"`
	}
	*a = InfoEncAd{}
	if json.Unmarshal(b, &raw) != nil {
		return nil
	}
	a.EncPub, a.Exp, a.V1 = optString(raw.EncPub), optString(raw.Exp), optString(raw.V1)
	return nil
}

// optString is a JSON string's value, or nil for null, absence or any other type.
func optString(raw json.RawMessage) *string {
	var s string
	if len(raw) == 0 || raw[0] != '"' || json.Unmarshal(raw, &s) != nil {
		return nil
	}
	return &s
}

// Holds reports whether the summary says the relay holds a current v2 ad naming encPub at now:
// enc_pub is encPub and exp is a time after now.
func (a *InfoEncAd) Holds(encPub string, now time.Time) bool {
	if a == nil || a.EncPub == nil || *a.EncPub != encPub || a.Exp == nil {
		return false
	}
	exp, err := ParseISOTime(*a.Exp)
	return err == nil && exp.After(now)
}

// PullItem is one item of GET /v2/relay/items.
type PullItem struct {
	Seq          int64  `json:"seq"`
	Kind         string `json:"kind"`
	ItemID       string `json:"item_id"`
	SenderPubkey string `json:"sender_pubkey"`
	WireB64      string `json:"wire_b64"`
}

// PullResponse is the body of GET /v2/relay/items?after=&limit=&epoch=. LastSeq is the last seq
// returned (after, when none was); HeadSeq the last seq allocated for the caller.
type PullResponse struct {
	Epoch   string     `json:"epoch"`
	HeadSeq int64      `json:"head_seq"`
	Items   []PullItem `json:"items"`
	LastSeq int64      `json:"last_seq"`
	More    bool       `json:"more"`
	// RetryAfter is not part of the body: it is the Retry-After of an empty answer to a long
	// poll the relay did not hold (its parked polls were full, or it is shutting down), set by
	// the client. The host pulls again after about that long, jittered.
	RetryAfter time.Duration `json:"-"`
}

// AckRequest is the body of POST /v2/relay/ack.
type AckRequest struct {
	Epoch   string `json:"epoch"`
	Through int64  `json:"through"`
}

// AckResponse is the answer to POST /v2/relay/ack.
type AckResponse struct {
	AckedThrough int64 `json:"acked_through"`
	Deleted      int64 `json:"deleted"`
	HeadSeq      int64 `json:"head_seq"`
}

// Error codes of relay error bodies.
const (
	CodeEpoch  = "EPOCH"   // 409: the epoch is not current; the body carries the current one
	CodeBadAck = "BAD_ACK" // 400: through is beyond the head; treat as an epoch change
)

// ErrorResponse is a relay error body: {"error": …} plus, where it applies, the code, the current
// epoch and the caller's head.
type ErrorResponse struct {
	Error   string `json:"error"`
	Code    string `json:"code,omitempty"`
	Epoch   string `json:"epoch,omitempty"`
	HeadSeq *int64 `json:"head_seq,omitempty"`
}

// OKResponse is the {"ok":true} answer of enrol, senders and enc-key publication.
type OKResponse struct {
	OK bool `json:"ok"`
}

// Helpers shared by the record parsers. The records are checked the way the original checks
// them: as a generic JSON tree, with JavaScript's notion of types, numbers and string lengths.

// parseObject parses data as one JSON object.
func parseObject(data []byte) (map[string]any, bool) {
	v, err := ParseJSON(data)
	if err != nil {
		return nil, false
	}
	m, ok := v.(map[string]any)
	return m, ok
}

// getString returns m[key] when it is a string.
func getString(m map[string]any, key string) (string, bool) {
	s, ok := m[key].(string)
	return s, ok
}

// getNumber returns m[key] when it is a number, as JavaScript would read it.
func getNumber(m map[string]any, key string) (float64, bool) {
	n, ok := m[key].(json.Number)
	if !ok {
		return 0, false
	}
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil && !math.IsInf(f, 0) {
		return 0, false
	}
	return f, true
}

// isNumber reports whether m[key] is the number want (1, 1.0 and 1e0 are all 1, as in JavaScript).
func isNumber(m map[string]any, key string, want float64) bool {
	f, ok := getNumber(m, key)
	return ok && f == want
}

// getSafeInt returns m[key] when it is a number that is a safe integer (Number.isSafeInteger).
func getSafeInt(m map[string]any, key string) (int64, bool) {
	f, ok := getNumber(m, key)
	if !ok || f != math.Trunc(f) || math.Abs(f) > maxSafeInteger {
		return 0, false
	}
	return int64(f), true
}

// parseTime parses an ISO-8601 time as the original's Date.parse does for the forms it writes.
func parseTime(s string) (time.Time, bool) {
	t, err := ParseISOTime(s)
	return t, err == nil
}
