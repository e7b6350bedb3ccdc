package relayserver

import (
	"container/list"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// TrustProxy says which header, if any, carries the client address (docs/design.md: The relay
// store). Only the entry a trusted proxy appended is believed: earlier X-Forwarded-For entries are
// client-controlled.
type TrustProxy int

// Proxy modes.
const (
	// TrustNone uses the TCP peer address.
	TrustNone TrustProxy = iota
	// TrustXFF uses the rightmost X-Forwarded-For entry.
	TrustXFF
	// TrustCloudflare uses CF-Connecting-IP.
	TrustCloudflare
)

// String returns the spelling of --trust-proxy.
func (t TrustProxy) String() string {
	switch t {
	case TrustXFF:
		return "xff"
	case TrustCloudflare:
		return "cloudflare"
	default:
		return "none"
	}
}

// ParseTrustProxy reads --trust-proxy / MBX_RELAY_TRUST_PROXY: "", "none", "xff" or
// "cloudflare".
func ParseTrustProxy(s string) (TrustProxy, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "none", "off":
		return TrustNone, nil
	case "xff", "x-forwarded-for":
		return TrustXFF, nil
	case "cloudflare", "cf":
		return TrustCloudflare, nil
	}
	return TrustNone, ErrBadRequest
}

// clientKey returns the key of a request's client: its IP address, an IPv6 address reduced to its
// /64 (one site's addresses share a budget).
func clientKey(r *http.Request, mode TrustProxy) string {
	keys := clientKeys(r, mode)
	return keys[0].key
}

// rateKey is one bucket a call is counted in; scale multiplies the table's rate and burst.
type rateKey struct {
	key   string
	scale int
}

// clientKeys returns the buckets of a request's client address: an IPv4 address alone; an IPv6
// address at /64 (rate ×1), /56 (×4) and /48 (×16), so that a network which owns many /64s gets
// a larger budget, but a bounded one.
func clientKeys(r *http.Request, mode TrustProxy) []rateKey {
	var s string
	switch mode {
	case TrustXFF:
		if v := r.Header.Values("X-Forwarded-For"); len(v) > 0 {
			last := v[len(v)-1]
			if i := strings.LastIndexByte(last, ','); i >= 0 {
				last = last[i+1:]
			}
			s = strings.TrimSpace(last)
		}
	case TrustCloudflare:
		s = strings.TrimSpace(r.Header.Get("CF-Connecting-IP"))
	}
	addr, err := netip.Addr{}, errNoProxyAddr // no header: no parse, whose error would be allocated
	if s != "" {
		addr, err = netip.ParseAddr(s)
	}
	if err != nil {
		host, _, serr := net.SplitHostPort(r.RemoteAddr)
		if serr != nil {
			host = r.RemoteAddr
		}
		addr, err = netip.ParseAddr(host)
		if err != nil {
			return []rateKey{{key: r.RemoteAddr, scale: 1}}
		}
	}
	addr = addr.Unmap()
	if !addr.Is6() {
		return []rateKey{{key: addr.String(), scale: 1}}
	}
	keys := make([]rateKey, 0, 3)
	for _, l := range []struct{ bits, scale int }{{64, 1}, {56, 4}, {48, 16}} {
		p, _ := addr.Prefix(l.bits)
		keys = append(keys, rateKey{key: p.String(), scale: l.scale})
	}
	return keys
}

var errNoProxyAddr = errors.New("no proxy header")

// Defaults of the rate tables.
const (
	// DefaultNewEnrolmentsPerDay is how many new host keys one client address may enrol a day.
	DefaultNewEnrolmentsPerDay = 20
	// DefaultRateTableMax is how many buckets a rate table remembers.
	DefaultRateTableMax = 30_000
)

// rateTable holds token buckets (golang.org/x/time/rate) by key in a bounded LRU. A full table
// evicts its least recently used bucket only when that bucket has refilled to its burst, where
// forgetting it loses nothing; otherwise a key it does not hold shares one overflow bucket at the
// base rate. No sequence of calls resets a bucket that still counts anything: churning through
// new keys only ever lands in the overflow bucket.
type rateTable struct {
	mu       sync.Mutex
	every    rate.Limit // base rate, tokens per second
	burst    int        // base burst
	max      int
	ll       *list.List // of *rateEntry, most recently used first
	m        map[string]*list.Element
	overflow *rate.Limiter
}

type rateEntry struct {
	key string
	lim *rate.Limiter
}

// newRateTable allows limit calls per window per key (the bucket's burst), refilling evenly.
// limit <= 0 disables the table.
func newRateTable(limit int, window time.Duration, max int) *rateTable {
	t := &rateTable{burst: limit, max: max, ll: list.New(), m: map[string]*list.Element{}}
	if limit > 0 {
		t.every = rate.Limit(float64(limit) / window.Seconds())
		t.overflow = rate.NewLimiter(t.every, limit)
	}
	return t
}

// allow counts one call of key at now and reports whether it is within the limit.
func (t *rateTable) allow(key string, now time.Time) bool {
	return t.allowAll([]rateKey{{key: key, scale: 1}}, now)
}

// allowAll counts one call at now in every bucket of keys, and only when each of them has a
// token: a call refused by one bucket costs nothing in the others.
func (t *rateTable) allowAll(keys []rateKey, now time.Time) bool {
	if t.burst <= 0 {
		return true
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	lims := make([]*rate.Limiter, len(keys))
	for i, k := range keys {
		lims[i] = t.limiter(k, now)
		if lims[i].TokensAt(now) < 1 {
			return false
		}
	}
	for _, l := range lims {
		l.AllowN(now, 1)
	}
	return true
}

// hasRoom reports whether every bucket of keys has a token at now, without taking one.
func (t *rateTable) hasRoom(keys []rateKey, now time.Time) bool {
	if t.burst <= 0 {
		return true
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, k := range keys {
		if t.limiter(k, now).TokensAt(now) < 1 {
			return false
		}
	}
	return true
}

// limiter returns the bucket of k, making one when there is room. Called with t.mu held.
func (t *rateTable) limiter(k rateKey, now time.Time) *rate.Limiter {
	if e, ok := t.m[k.key]; ok {
		t.ll.MoveToFront(e)
		return e.Value.(*rateEntry).lim
	}
	if t.ll.Len() >= t.max {
		tail := t.ll.Back()
		old := tail.Value.(*rateEntry)
		if old.lim.TokensAt(now) < float64(old.lim.Burst()) {
			return t.overflow
		}
		t.ll.Remove(tail)
		delete(t.m, old.key)
	}
	scale := max(k.scale, 1)
	e := &rateEntry{key: k.key, lim: rate.NewLimiter(t.every*rate.Limit(scale), t.burst*scale)}
	t.m[k.key] = t.ll.PushFront(e)
	return e.lim
}

// inherit makes key to count in the bucket of key from, which it replaces (a rotated key takes its
// revoked predecessor's): when to has a bucket of its own too, the emptier of the two stays. When
// from has no bucket (forgotten once full, or never made) nothing changes. The bucket moves rather
// than being copied, so inheriting needs no room in a full table.
func (t *rateTable) inherit(from, to string, now time.Time) {
	if t.burst <= 0 || from == to {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	fe, ok := t.m[from]
	if !ok {
		return
	}
	delete(t.m, from)
	moved := fe.Value.(*rateEntry)
	if te, ok := t.m[to]; ok {
		own := te.Value.(*rateEntry)
		if moved.lim.TokensAt(now) < own.lim.TokensAt(now) {
			own.lim = moved.lim
		}
		t.ll.Remove(fe)
		t.ll.MoveToFront(te)
		return
	}
	moved.key = to
	t.m[to] = fe
	t.ll.MoveToFront(fe)
}

func (t *rateTable) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.ll.Len()
}
