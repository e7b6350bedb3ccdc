package mbx

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// Header names of both hop schemes.
const (
	HeaderHost = "x-mbx-host" // sender host name
	HeaderKey  = "x-mbx-key"  // relay hops, v2: the sender's base64 host key
	HeaderTS   = "x-mbx-ts"   // LAN: ISO-8601 ms; relay: decimal ms since the Unix epoch
	HeaderSig  = "x-mbx-sig"  // base64 Ed25519 signature of the hop input
	HeaderPort = "x-mbx-port" // LAN: unsigned hint, the sender's listening port
)

// The header names as net/http keeps them (http.CanonicalHeaderKey): a lookup with these
// spellings does not convert, and so allocates nothing.
var (
	canonHeaderTS  = http.CanonicalHeaderKey(HeaderTS)
	canonHeaderSig = http.CanonicalHeaderKey(HeaderSig)
)

// HopWindow is how far a hop's timestamp may be from the verifier's clock, either way, inclusive.
const HopWindow = 5 * time.Minute

// LANHopInput is what a LAN hop signs:
//
//	METHOD "\n" pathname "\n" ts "\n" hex(sha256(body))
//
// The pathname carries no query: the LAN server verifies url.pathname.
func LANHopInput(method, pathname, ts string, body []byte) []byte {
	return []byte(method + "\n" + pathname + "\n" + ts + "\n" + SHA256Hex(body))
}

// SignLANHop returns the headers of a host-to-host request from host. port, when not 0, is sent
// as the unsigned x-mbx-port hint.
func SignLANHop(k SigningKey, host string, port int, method, pathname string, body []byte, now time.Time) http.Header {
	ts := ISOTime(now)
	h := http.Header{}
	h.Set(HeaderHost, host)
	h.Set(HeaderTS, ts)
	h.Set(HeaderSig, k.Sign(LANHopInput(method, pathname, ts, body)))
	if port != 0 {
		h.Set(HeaderPort, strconv.Itoa(port))
	}
	return h
}

// VerifyLANHop checks a LAN hop against the pinned key of the host named in its x-mbx-host header
// (the caller looks that key up; an unpaired host never reaches here). The timestamp must be within
// HopWindow of now; the header string itself is what was signed.
func VerifyLANHop(pubB64 string, h http.Header, method, pathname string, body []byte, now time.Time) error {
	ts, sig := h.Get(HeaderTS), h.Get(HeaderSig)
	if h.Get(HeaderHost) == "" || ts == "" || sig == "" {
		return fmt.Errorf("%w: missing x-mbx headers", ErrBadHop)
	}
	if err := CheckLANHopTime(h, now); err != nil {
		return err
	}
	if !Verify(pubB64, LANHopInput(method, pathname, ts, body), sig) {
		return fmt.Errorf("%w: bad hop signature", ErrBadHop)
	}
	return nil
}

// RelayHopInput is what a relay hop signs: canonical JSON of
//
//	{method, path, ts, body: method ":" path ":" ts ":" rawBody}
//
// where path is RelaySignedPath of the request and rawBody the exact body text ("" for GET).
func RelayHopInput(method, path, ts string, body []byte) []byte {
	return appendRelayHopInput(make([]byte, 0, relayHopInputSize(method, path, ts, body)), method, path, ts, body)
}

// relayHopInputSize is about the length of the hop input, so that it is written without growing.
func relayHopInputSize(method, path, ts string, body []byte) int {
	return 96 + len(body) + len(body)/16 + 3*(len(method)+len(path)+len(ts))
}

// appendRelayHopInput appends RelayHopInput to b.
func appendRelayHopInput(b []byte, method, path, ts string, body []byte) []byte {
	// Keys in canonical order: body, method, path, ts. Only strings, so this cannot fail on valid
	// UTF-8; invalid UTF-8 in a body gets U+FFFD, which a verifier computes the same way.
	b = append(b, `{"body":`...)
	if utf8.Valid(body) && utf8.ValidString(method) && utf8.ValidString(path) && utf8.ValidString(ts) {
		// The common case, in one pass and without a copy of the body: the body member escaped
		// straight from its parts (":" needs no escape, and valid parts join into valid UTF-8).
		b = append(b, '"')
		b = appendJSEscaped(b, method)
		b = append(b, ':')
		b = appendJSEscaped(b, path)
		b = append(b, ':')
		b = appendJSEscaped(b, ts)
		b = append(b, ':')
		b = appendJSEscaped(b, body)
		b = append(b, '"')
	} else {
		b = appendJSStringLossy(b, method+":"+path+":"+ts+":"+string(body))
	}
	b = append(b, `,"method":`...)
	b = appendJSStringLossy(b, method)
	b = append(b, `,"path":`...)
	b = appendJSStringLossy(b, path)
	b = append(b, `,"ts":`...)
	b = appendJSStringLossy(b, ts)
	return append(b, '}')
}

func appendJSStringLossy(b []byte, s string) []byte {
	out, err := appendJSString(b, strings.ToValidUTF8(s, "\uFFFD"))
	if err != nil { // unreachable: the string is valid UTF-8 now
		panic(err)
	}
	return out
}

// RelaySignedPath is the path a relay hop covers: for /v2/ paths the pathname and the raw query
// (the cursor is signed), for /v1 the pathname only.
func RelaySignedPath(u *url.URL) string {
	p := u.EscapedPath()
	if strings.HasPrefix(p, "/v2/") && u.RawQuery != "" {
		return p + "?" + u.RawQuery
	}
	return p
}

// SignRelayHop returns the headers of a request from host to a relay. path must be the signed
// path (RelaySignedPath of the request URL). withKey adds x-mbx-key, which v2 relays use to find
// the caller by key.
func SignRelayHop(k SigningKey, host, method, path string, body []byte, now time.Time, withKey bool) http.Header {
	ts := strconv.FormatInt(now.UnixMilli(), 10)
	h := http.Header{}
	h.Set(HeaderHost, host)
	if withKey {
		h.Set(HeaderKey, k.PublicKey())
	}
	h.Set(HeaderTS, ts)
	h.Set(HeaderSig, k.Sign(RelayHopInput(method, path, ts, body)))
	return h
}

// VerifyRelayHop checks a relay hop against pubB64, the key the relay found for the caller (by
// x-mbx-key, or by x-mbx-host for v1). |now − ts| must be at most HopWindow.
func VerifyRelayHop(pubB64 string, h http.Header, method, signedPath string, body []byte, now time.Time) error {
	ts, sig := h.Get(canonHeaderTS), h.Get(canonHeaderSig)
	if ts == "" || sig == "" {
		return fmt.Errorf("%w: missing x-mbx headers", ErrBadHop)
	}
	if err := CheckRelayHopTime(h, now); err != nil {
		return err
	}
	bp := hopInputBufs.Get().(*[]byte)
	in := appendRelayHopInput(slices.Grow((*bp)[:0], relayHopInputSize(method, signedPath, ts, body)), method, signedPath, ts, body)
	ok := Verify(pubB64, in, sig)
	if *bp = in[:0]; cap(in) <= maxPooledHopInput {
		hopInputBufs.Put(bp)
	}
	if !ok {
		return fmt.Errorf("%w: bad hop signature", ErrBadHop)
	}
	return nil
}

// hopInputBufs are the buffers VerifyRelayHop writes hop inputs into; one is free again once its
// signature is checked. A buffer grown past maxPooledHopInput (a huge body's) is not kept.
var hopInputBufs = sync.Pool{New: func() any { return new([]byte) }}

const maxPooledHopInput = 256 << 10

// InHopWindow reports whether t is within HopWindow of now, either way, inclusive. It compares
// instants: a subtracted Duration saturates for a timestamp centuries away, which would let it
// pass.
func InHopWindow(t, now time.Time) bool {
	return !t.Before(now.Add(-HopWindow)) && !t.After(now.Add(HopWindow))
}

// CheckRelayHopTime checks the x-mbx-ts of a relay hop (decimal ms since the Unix epoch) against
// the window around now, so a server can refuse a stale hop before it reads the body.
func CheckRelayHopTime(h http.Header, now time.Time) error {
	ms, err := strconv.ParseInt(h.Get(canonHeaderTS), 10, 64)
	if err != nil || !InHopWindow(time.UnixMilli(ms), now) {
		return fmt.Errorf("%w: %w", ErrBadHop, ErrStaleHop)
	}
	return nil
}

// CheckLANHopTime checks the x-mbx-ts of a LAN hop (ISO-8601 ms) against the window around now.
func CheckLANHopTime(h http.Header, now time.Time) error {
	t, err := ParseISOTime(h.Get(HeaderTS))
	if err != nil || !InHopWindow(t, now) {
		return fmt.Errorf("%w: %w", ErrBadHop, ErrStaleHop)
	}
	return nil
}
