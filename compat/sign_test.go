package compat_test

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Signing as a 0.5.x host does, written from the wire facts (docs/protocol.md: canonical JSON,
// signed hops), not taken from the implementation.

type party struct {
	host string
	priv ed25519.PrivateKey
	pub  string // base64 of the raw public key
}

func partyFromSeed(host string, seed []byte) party {
	priv := ed25519.NewKeyFromSeed(seed)
	return party{host: host, priv: priv, pub: b64(priv.Public().(ed25519.PublicKey))}
}

func newParty(host string, n byte) party {
	seed := sha256.Sum256([]byte{'c', 'o', 'm', 'p', 'a', 't', n})
	return partyFromSeed(host, seed[:])
}

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

func (p party) sign(msg []byte) string { return b64(ed25519.Sign(p.priv, msg)) }

// canonical is the canonical JSON of a tree of map[string]any (ASCII keys), []any, string, int,
// int64, bool and nil: keys sorted, no whitespace, strings escaped as JSON.stringify does.
func canonical(v any) []byte {
	var b strings.Builder
	writeCanonical(&b, v)
	return []byte(b.String())
}

func writeCanonical(b *strings.Builder, v any) {
	switch x := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		b.WriteString(strconv.FormatBool(x))
	case int:
		b.WriteString(strconv.Itoa(x))
	case int64:
		b.WriteString(strconv.FormatInt(x, 10))
	case string:
		writeJSString(b, x)
	case []any:
		b.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				b.WriteByte(',')
			}
			writeCanonical(b, e)
		}
		b.WriteByte(']')
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys) // ASCII keys: byte order is UTF-16 order
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteByte(',')
			}
			writeJSString(b, k)
			b.WriteByte(':')
			writeCanonical(b, x[k])
		}
		b.WriteByte('}')
	default:
		panic(fmt.Sprintf("canonical: %T", v))
	}
}

func writeJSString(b *strings.Builder, s string) {
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		default:
			if r < 0x20 {
				fmt.Fprintf(b, `\u%04x`, r)
			} else {
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
}

// hop signs a relay request: v2 signs the path with its query and sends x-mbx-key, v1 signs the
// pathname only and names the host.
func (p party) hop(method, pathQuery string, body []byte, now time.Time, v2 bool) http.Header {
	path := pathQuery
	if !v2 {
		path, _, _ = strings.Cut(pathQuery, "?")
	}
	ts := strconv.FormatInt(now.UnixMilli(), 10)
	in := canonical(map[string]any{"method": method, "path": path, "ts": ts, "body": method + ":" + path + ":" + ts + ":" + string(body)})
	h := http.Header{}
	h.Set("content-type", "application/json")
	h.Set("x-mbx-host", p.host)
	if v2 {
		h.Set("x-mbx-key", p.pub)
	}
	h.Set("x-mbx-ts", ts)
	h.Set("x-mbx-sig", p.sign(in))
	return h
}

func isoMs(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }

func sha256hex(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }
