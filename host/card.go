package host

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/agentmbx/agentmbx/mbx"
)

// Host cards.
//
// A card introduces a host to another that cannot reach it for LAN pairing (another network, a
// relay in between). It is a JSON object
//
//	{"card": {"v":1, "type":"host-card", "host", "host_pubkey", "enc_pub", "addr"?, "at"},
//	 "sig": b64 Ed25519 signature by host_pubkey over mbx.Canonical(card)}
//
// The enc key is a plain field of the card, covered by the card's signature, rather than a
// nested v2 enc-key ad: an ad expires after 30 days, a card is meant to be pinned whenever its
// reader gets to it. Whoever pins a card must check its fingerprint with the card's owner
// through another channel (the CLI shows it first): the signature proves only that the card is
// whole and made by the holder of the key it names, not who that is.
const (
	// CardType is the type field of a host card.
	CardType = "host-card"
	// CardSkew is how far a card's time may be ahead of the reader's clock.
	CardSkew = 5 * time.Minute
	// MaxCardBytes caps the size of a card ParseCard reads.
	MaxCardBytes = 8 << 10

	cardMaxAddrLen = 300
	cardMaxTimeLen = 40
	cardMaxSigLen  = 200
)

// cardBody is the signed part of a host card, in the order Card prints it.
type cardBody struct {
	V          int    `json:"v"`
	Type       string `json:"type"`
	Host       string `json:"host"`
	HostPubkey string `json:"host_pubkey"`
	EncPub     string `json:"enc_pub"`
	Addr       string `json:"addr,omitempty"`
	At         string `json:"at"`
}

type signedCard struct {
	Card cardBody `json:"card"`
	Sig  string   `json:"sig"`
}

// Card returns this host's signed host card: its name, host key, enc key, the LAN address addr
// when not empty (host:port, as the peer should dial it) and the time, signed by the host key.
// The JSON is indented for people and ends with a newline.
func (h *Host) Card(_ context.Context, addr string) ([]byte, error) {
	if addr != "" {
		if err := mbx.CheckDialAddr(addr); err != nil {
			return nil, fmt.Errorf("host: card: %w: %v", ErrInvalid, err)
		}
	}
	return makeCard(h.name, h.key, h.enc.PublicKey(), addr, h.clock())
}

func makeCard(host string, k mbx.SigningKey, encPub, addr string, now time.Time) ([]byte, error) {
	c := cardBody{V: 1, Type: CardType, Host: host, HostPubkey: k.PublicKey(), EncPub: encPub, Addr: addr, At: mbx.ISOTime(now)}
	in, err := mbx.Canonical(c)
	if err != nil {
		return nil, fmt.Errorf("host: card: %w", err)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(signedCard{Card: c, Sig: k.Sign(in)}); err != nil {
		return nil, fmt.Errorf("host: card: %w", err)
	}
	return buf.Bytes(), nil
}

// ParseCard reads a host card and returns the peer it describes (AddedAt is left zero). It
// refuses, with ErrCardMalformed, anything but a v1 host card with exactly the fields above (a
// valid host name, 32-byte keys in padded standard base64, a dialable host:port, an ISO-8601
// time); with ErrCardSignature a card its own host key did not sign as received; and with
// ErrCardFuture a card dated more than CardSkew after now. Any whitespace and key order is
// accepted: the signature covers the canonical form.
func ParseCard(data []byte, now time.Time) (PeerRecord, error) {
	bad := func(what string) (PeerRecord, error) {
		return PeerRecord{}, fmt.Errorf("host: parse card: %w: %s", ErrCardMalformed, what)
	}
	if len(data) > MaxCardBytes {
		return bad(fmt.Sprintf("larger than %d bytes", MaxCardBytes))
	}
	tree, err := mbx.ParseJSON(data)
	if err != nil {
		return bad("not JSON")
	}
	top, ok := tree.(map[string]any)
	if !ok || !cardOnlyKeys(top, "card", "sig") {
		return bad(`want an object {"card", "sig"}`)
	}
	sig, ok := top["sig"].(string)
	if !ok || sig == "" || len(sig) > cardMaxSigLen {
		return bad("sig")
	}
	card, ok := top["card"].(map[string]any)
	if !ok || !cardOnlyKeys(card, "v", "type", "host", "host_pubkey", "enc_pub", "addr", "at") {
		return bad("card: unknown or missing fields")
	}
	if v, ok := card["v"].(json.Number); !ok || v.String() != "1" {
		return bad("card: version (want v 1)")
	}
	if t, _ := card["type"].(string); t != CardType {
		return bad(`card: type (want "host-card")`)
	}
	var c cardBody
	var okH, okK, okE, okA bool
	c.Host, okH = card["host"].(string)
	c.HostPubkey, okK = card["host_pubkey"].(string)
	c.EncPub, okE = card["enc_pub"].(string)
	c.At, okA = card["at"].(string)
	switch {
	case !okH || !mbx.ValidHostName(c.Host):
		return bad(fmt.Sprintf("host name %q", cardClip(c.Host)))
	case !okK || !mbx.ValidPublicKey(c.HostPubkey):
		return bad("host_pubkey (want 44 chars of base64)")
	case !okE || !mbx.ValidPublicKey(c.EncPub):
		return bad("enc_pub (want 44 chars of base64)")
	case !okA || len(c.At) > cardMaxTimeLen:
		return bad("at")
	}
	if a, present := card["addr"]; present {
		s, ok := a.(string)
		if !ok {
			return bad("addr")
		}
		if err := mbx.CheckDialAddr(s); err != nil {
			return bad(err.Error())
		}
		c.Addr = s
	}
	at, err := mbx.ParseISOTime(c.At)
	if err != nil {
		return bad("at: not an ISO-8601 time")
	}
	in, err := mbx.Canonical(card)
	if err != nil || !mbx.Verify(c.HostPubkey, in, sig) {
		return PeerRecord{}, fmt.Errorf("host: parse card of %s (%s): %w", c.Host, mbx.Fingerprint(c.HostPubkey), ErrCardSignature)
	}
	if at.After(now.Add(CardSkew)) {
		return PeerRecord{}, fmt.Errorf("host: parse card of %s: %w (at %s)", c.Host, ErrCardFuture, mbx.ISOTime(at))
	}
	return PeerRecord{Host: c.Host, HostPubkey: c.HostPubkey, EncPub: c.EncPub, Addr: c.Addr}, nil
}

// cardOnlyKeys reports whether m has every one of keys except possibly "addr", and nothing else.
func cardOnlyKeys(m map[string]any, keys ...string) bool {
	n := 0
	for _, k := range keys {
		if _, ok := m[k]; ok {
			n++
		} else if k != "addr" {
			return false
		}
	}
	return n == len(m)
}

// cardClip shortens outside input for an error message.
func cardClip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
