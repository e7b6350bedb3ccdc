package relayserver

import (
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"
)

// TrustProxy says which header, if any, carries the client address (spec §2). Only the entry a
// trusted proxy appended is believed: earlier X-Forwarded-For entries are client-controlled.
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

// clientKey returns the rate-limit key of a request: the client's IP address, an IPv6 address
// reduced to its /64 (one site's addresses share a budget).
func clientKey(r *http.Request, mode TrustProxy) string {
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
	addr, err := netip.ParseAddr(s)
	if err != nil {
		host, _, serr := net.SplitHostPort(r.RemoteAddr)
		if serr != nil {
			host = r.RemoteAddr
		}
		addr, err = netip.ParseAddr(host)
		if err != nil {
			return r.RemoteAddr
		}
	}
	addr = addr.Unmap()
	if addr.Is6() {
		p, _ := addr.Prefix(64)
		return p.String()
	}
	return addr.String()
}

// rateTable is a fixed-window rate limit per key with a hard cap on the number of keys it
// remembers: when full, expired windows are dropped first, then the oldest window.
type rateTable struct {
	mu     sync.Mutex
	limit  int
	window time.Duration
	max    int
	m      map[string]*rateWindow
}

type rateWindow struct {
	start time.Time
	n     int
}

func newRateTable(limit int, window time.Duration, max int) *rateTable {
	return &rateTable{limit: limit, window: window, max: max, m: map[string]*rateWindow{}}
}

// allow counts one call of key at now and reports whether it is within the limit.
func (t *rateTable) allow(key string, now time.Time) bool {
	if t.limit <= 0 {
		return true
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	w, ok := t.m[key]
	if ok && now.Sub(w.start) >= t.window {
		w.start, w.n = now, 0
	}
	if !ok {
		if len(t.m) >= t.max {
			t.evict(now)
		}
		w = &rateWindow{start: now}
		t.m[key] = w
	}
	if w.n >= t.limit {
		return false
	}
	w.n++
	return true
}

func (t *rateTable) evict(now time.Time) {
	var oldestKey string
	var oldest time.Time
	for k, w := range t.m {
		if now.Sub(w.start) >= t.window {
			delete(t.m, k)
			continue
		}
		if oldestKey == "" || w.start.Before(oldest) {
			oldestKey, oldest = k, w.start
		}
	}
	if len(t.m) >= t.max && oldestKey != "" {
		delete(t.m, oldestKey)
	}
}

func (t *rateTable) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.m)
}
