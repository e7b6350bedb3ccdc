package lan

import (
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/net/netutil"
)

// Bounds of every LAN-facing listener (the daemon's LAN server and the pairing server of
// `agentmbx pair` without a daemon): a stranger holds at most DefaultMaxConnsPerAddr of the
// DefaultMaxConns places, and a connection that says nothing is closed after HeaderTimeout (no
// request yet) or IdleTimeout (between requests).
const (
	// DefaultMaxConnsPerAddr is how many connections one client address may hold at once; past
	// it a new connection from that address is closed as soon as it is accepted.
	DefaultMaxConnsPerAddr = 8
	// HeaderTimeout bounds the time to read a request's headers.
	HeaderTimeout = 10 * time.Second
	// ReadTimeout and WriteTimeout bound a whole request (a body of the largest size at LAN
	// speed takes well under it) and its answer.
	ReadTimeout  = time.Minute
	WriteTimeout = time.Minute
	// IdleTimeout closes a kept-alive connection with no request for this long.
	IdleTimeout = 30 * time.Second
	// MaxHeaderBytes bounds a request's headers.
	MaxHeaderBytes = 64 << 10
)

// NewHTTPServer returns an http.Server for handler with the LAN timeouts and header bound.
// Serve it on LimitListener's listener.
func NewHTTPServer(handler http.Handler) *http.Server {
	return &http.Server{Handler: handler, ReadHeaderTimeout: HeaderTimeout, ReadTimeout: ReadTimeout,
		WriteTimeout: WriteTimeout, IdleTimeout: IdleTimeout, MaxHeaderBytes: MaxHeaderBytes}
}

// LimitListener wraps ln so that at most max connections are open at once
// (golang.org/x/net/netutil.LimitListener: the next waits in the kernel's backlog until one
// closes) and at most perAddr from any one client address: one past that is closed as it is
// accepted, before it takes a place or a byte is read. refused, when not nil, is called with the
// address of each connection closed so (it must not block).
func LimitListener(ln net.Listener, max, perAddr int, refused func(addr string)) net.Listener {
	if perAddr <= 0 {
		perAddr = DefaultMaxConnsPerAddr
	}
	if max <= 0 {
		max = DefaultMaxConns
	}
	return netutil.LimitListener(&addrLimitListener{Listener: ln, per: perAddr, open: map[string]int{}, refused: refused}, max)
}

// addrLimitListener counts the open connections of each client address.
type addrLimitListener struct {
	net.Listener
	per     int
	refused func(string)
	mu      sync.Mutex
	open    map[string]int
}

func (l *addrLimitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		key := connAddrKey(c.RemoteAddr())
		l.mu.Lock()
		full := l.open[key] >= l.per
		if !full {
			l.open[key]++
		}
		l.mu.Unlock()
		if full {
			c.Close()
			if l.refused != nil {
				l.refused(key)
			}
			continue
		}
		return &addrConn{Conn: c, l: l, key: key}, nil
	}
}

func (l *addrLimitListener) release(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[key]--; l.open[key] <= 0 {
		delete(l.open, key)
	}
}

// connAddrKey is the address a connection counts against: its IP (an IPv4-mapped IPv6 one as
// IPv4), or the address's text when it has no IP.
func connAddrKey(a net.Addr) string {
	if ta, ok := a.(*net.TCPAddr); ok {
		if ip, ok := netip.AddrFromSlice(ta.IP); ok {
			return ip.Unmap().String()
		}
	}
	if ap, err := netip.ParseAddrPort(a.String()); err == nil {
		return ap.Addr().Unmap().String()
	}
	return a.String()
}

// addrConn gives its address's place back once, when closed.
type addrConn struct {
	net.Conn
	l    *addrLimitListener
	key  string
	once sync.Once
}

func (c *addrConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c.key) })
	return err
}
