// Package card is the host card: a host's name, host key, enc key and optional LAN address,
// signed by its host key, for pinning a peer that LAN pairing cannot reach. Make writes one, Parse
// reads and checks one.
package card

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/mbx"
)

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
	// Type is the type field of a host card.
	Type = "host-card"
	// Skew is how far a card's time may be ahead of the reader's clock.
	Skew = 5 * time.Minute
	// MaxBytes caps the size of a card Parse reads.
	MaxBytes = 8 << 10

	cardMaxAddrLen = 300
	cardMaxTimeLen = 40
	cardMaxSigLen  = 200
)

// cardBody is the signed part of a host card, in the order Make prints it.
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

// Card is what a host card says of its host.
type Card struct {
	Host       string
	HostPubkey string
	EncPub     string
	Addr       string // "" when the card names none
}

// Errors of Parse (api.CodedErrors: each names its control-socket code and a hint).
var (
	// ErrMalformed is returned by Parse for input that is not a v1 host card: not JSON, too
	// large, unknown or missing fields, a bad host name, key, address or time. The message says
	// which.
	ErrMalformed = api.NewError(api.CodeBadRequest, "malformed host card",
		"a card is the JSON that `agentmbx id --card` prints on the other host, unchanged")
	// ErrSignature is returned by Parse when the card's host key did not sign the card as
	// received.
	ErrSignature = api.NewError(api.CodeRefused, "host card signature does not verify",
		"the card was changed after it was made; ask for a fresh `agentmbx id --card`")
	// ErrFuture is returned by Parse for a card made more than Skew after now (a clock far off on
	// one side, or a forged time).
	ErrFuture = api.NewError(api.CodeRefused, "host card is dated in the future",
		"check the clocks of both hosts")
)

// Make returns the signed card of host (host key k, enc key encPub, LAN address addr when not
// empty) made at now. The JSON is indented for people and ends with a newline.
func Make(host string, k mbx.SigningKey, encPub, addr string, now time.Time) ([]byte, error) {
	c := cardBody{V: 1, Type: Type, Host: host, HostPubkey: k.PublicKey(), EncPub: encPub, Addr: addr, At: mbx.ISOTime(now)}
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

// Parse reads a host card and returns what it says. It refuses, with ErrMalformed, anything but a v1 host card with exactly the fields above (a
// valid host name, 32-byte keys in padded standard base64, a dialable host:port, an ISO-8601
// time); with ErrSignature a card its own host key did not sign as received; and with ErrFuture a
// card dated more than Skew after now. Any whitespace and key order is
// accepted: the signature covers the canonical form.
func Parse(data []byte, now time.Time) (Card, error) {
	bad := func(what string) (Card, error) {
		return Card{}, fmt.Errorf("host: parse card: %w: %s", ErrMalformed, what)
	}
	if len(data) > MaxBytes {
		return bad(fmt.Sprintf("larger than %d bytes", MaxBytes))
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
	if t, _ := card["type"].(string); t != Type {
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
		return Card{}, fmt.Errorf("host: parse card of %s (%s): %w", c.Host, mbx.Fingerprint(c.HostPubkey), ErrSignature)
	}
	if at.After(now.Add(Skew)) {
		return Card{}, fmt.Errorf("host: parse card of %s: %w (at %s)", c.Host, ErrFuture, mbx.ISOTime(at))
	}
	return Card{Host: c.Host, HostPubkey: c.HostPubkey, EncPub: c.EncPub, Addr: c.Addr}, nil
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
