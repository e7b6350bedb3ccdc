package soak

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// maxBody bounds the bodies the proxy holds in memory (requests and answers).
const maxBody = 64 << 20

// Faults are the proxy's fault rates (each request draws once) and its added latency.
type Faults struct {
	// Reset closes the client's connection with a TCP RST before the request is forwarded.
	Reset float64
	// LoseResponse forwards the request, reads the whole answer and then closes the client's
	// connection without writing it: the relay did the work, the host never hears of it.
	LoseResponse float64
	// MaxLatency delays each request by a uniform random time in [0, MaxLatency).
	MaxLatency time.Duration
}

// Proxy is a small HTTP proxy in front of one upstream address that injects Faults, drawn from
// a seeded generator. It is ours rather than toxiproxy's because the fault that matters here is
// at the HTTP level (the answer lost after the request was served), which a TCP proxy cannot
// place precisely, and it is a few dozen lines.
type Proxy struct {
	upstream string
	faults   Faults
	mu       sync.Mutex
	rng      *rand.Rand
	client   *http.Client
	srv      *http.Server
	ln       net.Listener

	lost, resets, forwarded atomic.Int64
}

// StartProxy listens on 127.0.0.1:0 and forwards to upstream (host:port).
func StartProxy(upstream string, seed uint64, f Faults) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("soak proxy: %w", err)
	}
	p := &Proxy{
		upstream: upstream, faults: f, ln: ln,
		rng:    rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}},
	}
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 30 * time.Second}
	go func() { _ = p.srv.Serve(ln) }() // ErrServerClosed at Close
	return p, nil
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Close stops the proxy.
func (p *Proxy) Close() error { return p.srv.Close() }

// Lost is how many answers the proxy dropped after the upstream served the request.
func (p *Proxy) Lost() int64 { return p.lost.Load() }

// Resets is how many connections the proxy reset before forwarding.
func (p *Proxy) Resets() int64 { return p.resets.Load() }

// Forwarded is how many requests reached the upstream.
func (p *Proxy) Forwarded() int64 { return p.forwarded.Load() }

type fate int

const (
	pass fate = iota
	reset
	lose
)

// draw picks one request's latency and fate.
func (p *Proxy) draw() (time.Duration, fate) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var d time.Duration
	if p.faults.MaxLatency > 0 {
		d = time.Duration(p.rng.Int64N(int64(p.faults.MaxLatency)))
	}
	x := p.rng.Float64()
	switch {
	case x < p.faults.Reset:
		return d, reset
	case x < p.faults.Reset+p.faults.LoseResponse:
		return d, lose
	}
	return d, pass
}

// hopHeaders are not forwarded in either direction.
var hopHeaders = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	d, f := p.draw()
	time.Sleep(d)
	if f == reset {
		p.resets.Add(1)
		abort(w, true)
		return
	}
	resp, body, err := p.forward(r)
	if err != nil {
		http.Error(w, "soak proxy: "+err.Error(), http.StatusBadGateway)
		return
	}
	if f == lose {
		p.lost.Add(1)
		abort(w, false)
		return
	}
	for k, vs := range resp.Header {
		w.Header()[k] = vs
	}
	for _, h := range hopHeaders {
		w.Header().Del(h)
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(body) // the host under test may hang up; the soak checks delivery, not this
}

// forward sends r upstream and reads the whole answer.
func (p *Proxy) forward(r *http.Request) (*http.Response, []byte, error) {
	in, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil || len(in) > maxBody {
		return nil, nil, errors.Join(errors.New("request body"), err)
	}
	out, err := http.NewRequestWithContext(r.Context(), r.Method, "http://"+p.upstream+r.URL.RequestURI(), bytes.NewReader(in))
	if err != nil {
		return nil, nil, err
	}
	out.Header = r.Header.Clone()
	for _, h := range hopHeaders {
		out.Header.Del(h)
	}
	out.Host = r.Host
	resp, err := p.client.Do(out)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	p.forwarded.Add(1)
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	return resp, body, err
}

// abort closes the client's connection without an answer; with rst, as a TCP reset.
func abort(w http.ResponseWriter, rst bool) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	if tc, ok := conn.(*net.TCPConn); ok && rst {
		_ = tc.SetLinger(0) // only makes the close a reset; without it the drop is still a drop
	}
	conn.Close()
}
