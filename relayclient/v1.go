package relayclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/agentmbx/agentmbx/mbx"
)

// The v1 fallback (docs/design.md: Compatibility). A client uses v2 whenever GET /v2/relay/info
// answers (Negotiate); a relay that answers 404 speaks v1 only, and V1 talks to it with the
// durability that v1 allows.
//
// What a v1 relay cannot promise, and what follows for the caller:
//
//   - No relay key and no accept statement: a v1 200 is the relay's unsigned word that it stored
//     the envelope (a 0.5.3-era relay answered it before anything was durable). The outbox must
//     not take it as acceptance: the row stays active, is pushed again on its backoff (v1 dedup
//     is by envelope id per sender and target, and receivers dedup by id, so repeats are
//     harmless), and is settled only by the target's signed delivery receipt, or ends with the
//     unconfirmed alert at its deadline.
//   - Routing by host name: a name resolves only when one live enrolment carries it; an
//     ambiguous name stores nothing (an error the caller sees), but a name the wrong host
//     enrolled first would route there. Sealing to the enc key pinned at pairing keeps the
//     content from that host; it cannot keep the item.
//   - No epoch: a relay that lost its store or went back in time is seen only as a cursor below
//     the one asked for (V1Page.Rewound): pull again from 0 and let dedup absorb the repeats.
//   - No receipts and no expiry notices: v1 carries envelopes only, so delivery receipts travel
//     over the LAN (or a v2 relay) or not at all.
//   - No trusted enc keys: v1 enc-key ads never expire, so one served by the relay may be a
//     replay; a sender seals only to an enc key pinned at pairing (mbx.EncFromRelayAnswer refuses
//     v1 ads from a relay).
//   - No long poll: pulls are plain polls.

// Protocol is the relay API a client speaks with a relay.
type Protocol int

const (
	ProtocolV2 Protocol = 2
	ProtocolV1 Protocol = 1
)

// Negotiate asks the relay at rawURL for GET /v2/relay/info: ProtocolV2 with the info when it
// answers, ProtocolV1 when it answers 404 (a v1-only relay), an error otherwise (no answer is no
// reason to fall back: the relay may be a v2 relay that is down).
func Negotiate(ctx context.Context, rawURL string, opts *Options) (Protocol, mbx.InfoResponse, error) {
	info, err := Discover(ctx, rawURL, opts)
	switch {
	case err == nil:
		return ProtocolV2, info, nil
	case errors.Is(err, ErrV1Only):
		return ProtocolV1, mbx.InfoResponse{}, nil
	default:
		return 0, mbx.InfoResponse{}, err
	}
}

// V1 is a client of a relay's v1 API, acting as host (its name) with its host key. Its hops name
// the host (no x-mbx-key) and sign the pathname only, as v1 relays check them.
type V1 struct {
	url  string
	host string
	key  mbx.SigningKey
	settings
}

// NewV1 returns a v1 client for the relay at rawURL.
func NewV1(rawURL, host string, key mbx.SigningKey, opts *Options) (*V1, error) {
	base, err := NormalizeURL(rawURL)
	if err != nil {
		return nil, fmt.Errorf("relayclient: new v1: %w", err)
	}
	if key.IsZero() || host == "" {
		return nil, fmt.Errorf("relayclient: new v1: %w: no host key or name", ErrInvalid)
	}
	st, err := newSettings(opts)
	if err != nil {
		return nil, fmt.Errorf("relayclient: new v1: %w", err)
	}
	return &V1{url: base, host: host, key: key, settings: st}, nil
}

func (c *V1) do(ctx context.Context, r request) (answer, error) {
	var sign func(method, path string, body []byte) http.Header
	if r.hop {
		sign = func(method, path string, body []byte) http.Header {
			return mbx.SignRelayHop(c.key, c.host, method, path, body, c.clock(), false)
		}
	}
	return send(ctx, &c.settings, c.url, r, sign)
}

// Enrol enrols the host key (the same challenge as v2: POST /v1/relay/challenge and enrol).
func (c *V1) Enrol(ctx context.Context, ownerFP string) error {
	return enrol(ctx, c.do, c.host, c.key, ownerFP, "")
}

// PublishEncAd publishes the v1 enc-key ad {v:1, host, enc_pub} (POST /v1/relay/enc-key), for
// 0.5.x v1 senders that look this host up by name.
func (c *V1) PublishEncAd(ctx context.Context, encPub string) error {
	return publishEncAdV1(ctx, c.do, c.host, c.key, encPub)
}

// V1PushResult is the answer of a v1 push: how many envelopes of the batch the relay stored, in
// order, and why it stopped before the next one ("" when it stored all).
type V1PushResult struct {
	Stored int    `json:"stored"`
	Error  string `json:"error,omitempty"`
}

// Push sends sealed envelopes (each the JSON object of one envelope sealed for its host) in one
// batch (POST /v1/relay/messages). The relay stores them in order until the first refusal; a
// refusal of the first is a *StatusError (413 with the relay's reason, ErrRefused) and the
// result says Stored 0. Stored is not an acceptance (see the package's v1 notes): keep each row
// until its delivery receipt.
func (c *V1) Push(ctx context.Context, envelopes []json.RawMessage) (V1PushResult, error) {
	for i, e := range envelopes {
		var probe map[string]json.RawMessage
		if json.Unmarshal(e, &probe) != nil || probe["enc"] == nil || string(probe["enc"]) == "null" {
			return V1PushResult{}, fmt.Errorf("relayclient: v1 push: %w: envelope %d is not a sealed envelope object", ErrInvalid, i)
		}
	}
	body, err := mbx.MarshalJSON(map[string]any{"envelopes": envelopes})
	if err != nil {
		return V1PushResult{}, fmt.Errorf("relayclient: v1 push: %w", err)
	}
	a, err := c.do(ctx, request{op: "v1 push", method: "POST", path: "/v1/relay/messages", body: body, hop: true, max: maxSmallAnswer})
	if err != nil {
		return V1PushResult{}, err
	}
	var res V1PushResult
	if err := decode("v1 push", a, &res); err != nil {
		return V1PushResult{}, err
	}
	if res.Stored < 0 || res.Stored > len(envelopes) {
		return V1PushResult{}, fmt.Errorf("relayclient: v1 push: %w: stored %d of %d", ErrProtocol, res.Stored, len(envelopes))
	}
	res.Error = clip(res.Error, 300)
	return res, nil
}

// V1Item is one envelope of a v1 page.
type V1Item struct {
	Seq      int64           `json:"seq"`
	Envelope json.RawMessage `json:"envelope"`
	From     string          `json:"from"` // the sender's host name as the relay knows it (unchecked)
}

// V1Page is a v1 pull answer. Cursor is where the next pull starts and what Ack takes once the
// items are processed. Rewound reports a cursor below the one asked for: the relay's store went
// back (v1 has no epoch): pull again from 0.
type V1Page struct {
	Items   []V1Item `json:"items"`
	Cursor  int64    `json:"cursor"`
	Rewound bool     `json:"-"`
}

// Pull fetches the envelopes after cursor after (GET /v1/relay/messages?after=). Items must come
// in increasing seq order after after and not past the cursor; anything else is ErrProtocol.
func (c *V1) Pull(ctx context.Context, after int64) (V1Page, error) {
	if after < 0 {
		return V1Page{}, fmt.Errorf("relayclient: v1 pull: %w: negative cursor", ErrInvalid)
	}
	a, err := c.do(ctx, request{op: "v1 pull", method: "GET", path: "/v1/relay/messages?after=" + strconv.FormatInt(after, 10), hop: true, max: maxPullAnswer})
	if err != nil {
		return V1Page{}, err
	}
	var p V1Page
	if err := decode("v1 pull", a, &p); err != nil {
		return V1Page{}, err
	}
	if p.Cursor < after {
		return V1Page{Cursor: 0, Rewound: true}, nil
	}
	last := after
	for _, it := range p.Items {
		if it.Seq <= last || it.Seq > p.Cursor || len(it.Envelope) == 0 || it.Envelope[0] != '{' {
			return V1Page{}, fmt.Errorf("relayclient: v1 pull: %w: item seq %d out of order or not an envelope", ErrProtocol, it.Seq)
		}
		last = it.Seq
	}
	return p, nil
}

// Ack tells the relay everything through cursor is processed (POST /v1/relay/ack); the relay
// drops it. Ack only what is durably received.
func (c *V1) Ack(ctx context.Context, cursor int64) error {
	body, err := mbx.MarshalJSON(map[string]int64{"cursor": cursor})
	if err != nil {
		return fmt.Errorf("relayclient: v1 ack: %w", err)
	}
	a, err := c.do(ctx, request{op: "v1 ack", method: "POST", path: "/v1/relay/ack", body: body, hop: true, max: maxSmallAnswer})
	if err != nil {
		return err
	}
	return expectOK("v1 ack", a)
}
