package mcp

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/agentmbx/agentmbx/api"
)

// Another agent's words never reach an agent bare. In every text a tool or resource returns,
// each message body (with its subject) sits inside a fence:
//
//	<<untrusted mail N: from bob@beta, host key 1a2b-3c4d-5e6f-7a8b, via relay, signature verified>>
//	subject: …
//	…the body…
//	<<end untrusted mail N>>
//
// The first line names the sender as this host verified it: the address, the fingerprint of the
// host key whose signature was checked on arrival (as `agentmbx peers` shows it) and the way the
// message came. N is a nonce drawn for the whole response that occurs nowhere else in it, so a
// body cannot end its fence early and pass the text after it off as this server's own words.

// fenceWord starts every fence line; the end line is "<<end " + fenceWord + " N>>".
const fenceWord = "untrusted mail"

// nonceBytes is the size of a fence nonce (16 hex digits).
const nonceBytes = 8

// maxDraws bounds how often a response is rendered with a fresh nonce before giving up. A body
// of at most 256 KiB holds far too few 16-digit runs for even a second draw to be likely.
const maxDraws = 8

var errNoNonce = errors.New("mcp: no fence nonce that the response does not already hold")

// fenced renders a response with render(nonce) and returns it with the nonce, drawing a new
// nonce until it occurs in the text exactly twice per fence (its own lines) and nowhere else.
// render returns the text and how many fences it holds.
func fenced(render func(nonce string) (string, int)) (string, string, error) {
	for range maxDraws {
		var b [nonceBytes]byte
		if _, err := rand.Read(b[:]); err != nil {
			return "", "", fmt.Errorf("mcp: fence nonce: %w", err)
		}
		nonce := hex.EncodeToString(b[:])
		text, fences := render(nonce)
		if strings.Count(text, nonce) == 2*fences {
			return text, nonce, nil
		}
	}
	return "", "", errNoNonce
}

// Sender is how this host knows who wrote a message: the fields of a fence line, also carried
// in the structured content beside each message.
type Sender struct {
	// Fingerprint is the sending host's key fingerprint: the key whose signature this host
	// verified on arrival, or this host's own for mail written here ("" when unknown).
	Fingerprint string `json:"fingerprint"`
	// Via is lan, relay, local (written on this host) or unrecorded (stored before arrival was
	// recorded).
	Via string `json:"via"`
	// Verified says the message's signature was verified on arrival (all mail from another host).
	Verified bool `json:"verified"`
}

const viaUnrecorded = "unrecorded"

// fenceOpen is a fence's first line.
func fenceOpen(nonce, from string, s Sender) string {
	key := s.Fingerprint
	if key == "" {
		key = "unknown"
	}
	var how string
	switch s.Via {
	case api.ViaLAN:
		how = "via LAN"
	case api.ViaRelay:
		how = "via relay"
	case api.ViaLocal:
		how = "written on this host"
	default:
		how = "via LAN or relay (not recorded)"
	}
	if s.Verified {
		how += ", signature verified"
	} else {
		how += ", not signed"
	}
	return fmt.Sprintf("<<%s %s: from %s, host key %s, %s>>", fenceWord, nonce, line(from), key, how)
}

func fenceClose(nonce string) string { return "<<end " + fenceWord + " " + nonce + ">>" }

// senders works out the Sender of each message: from what the host recorded on arrival, else
// (mail stored before that was recorded) from the pinned key of its origin, or this host's key
// for mail written here. It asks the host only when some message needs it.
type senders struct {
	h     Host
	name  string            // this host's name, once looked up
	self  string            // this host's fingerprint, once looked up
	pins  map[string]string // peer host → fingerprint, once looked up
	ready bool
}

// lookup asks the host once for its own name and key and its peers' keys.
func (ss *senders) lookup(ctx context.Context) {
	if ss.ready || ss.h == nil {
		return
	}
	ss.ready = true
	if st, err := ss.h.Status(ctx); err == nil {
		ss.name, ss.self = st.Host, st.Fingerprint
	}
	if ps, err := ss.h.Peers(ctx); err == nil {
		ss.pins = map[string]string{}
		for _, p := range ps {
			ss.pins[p.Host] = p.Fingerprint
		}
	}
}

// hostKey is the fingerprint of host's key as pinned here (this host's own for its name), ""
// when unknown.
func (ss *senders) hostKey(ctx context.Context, host string) string {
	ss.lookup(ctx)
	if host == ss.name {
		return ss.self
	}
	return ss.pins[host]
}

func (ss *senders) of(ctx context.Context, m api.Message) Sender {
	remote := m.Origin != "" && m.Via != api.ViaLocal
	s := Sender{Fingerprint: m.Fingerprint, Via: m.Via, Verified: remote}
	if s.Via == "" {
		s.Via = viaUnrecorded
		if m.Origin == "" {
			s.Via = api.ViaLocal
		}
	}
	if s.Fingerprint != "" || ss.h == nil {
		return s
	}
	ss.lookup(ctx)
	if remote {
		s.Fingerprint = ss.pins[m.Origin]
	} else {
		s.Fingerprint = ss.self
	}
	return s
}

// noteOpen is the first line of the fence around a recipient's acknowledgement note (it came in
// that recipient host's signed receipt, or from an agent of this host).
func noteOpen(nonce, from, key string) string {
	if key == "" {
		key = "unknown"
	}
	return fmt.Sprintf("<<untrusted note %s: from %s, host key %s, in a signed receipt>>", nonce, line(from), key)
}

func noteClose(nonce string) string { return "<<end untrusted note " + nonce + ">>" }
