package lan_test

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/agentmbx/agentmbx/lan"
)

// pipeListener is a net.Listener of in-memory connections (net.Pipe), for tests inside a
// synctest bubble: a goroutine waiting in Accept, or reading a connection nobody writes, is
// durably blocked, so synctest.Wait returns once the server has taken every connection it will.
type pipeListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
	n     atomic.Int32 // connections dialled, for their default addresses
}

// pipeConn is the server's end of a pipe, with the client address it claims.
type pipeConn struct {
	net.Conn
	remote net.Addr
}

func (c pipeConn) RemoteAddr() net.Addr { return c.remote }

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), done: make(chan struct{})}
}

// dial queues a connection for Accept (on its own goroutine: it waits until the server takes it)
// from an address of its own (127.0.1.N) and returns the client's end.
func (l *pipeListener) dial() net.Conn {
	n := l.n.Add(1)
	return l.dialFrom(fmt.Sprintf("127.0.%d.%d", 1+n/250, 1+n%250))
}

// dialFrom is dial from the client address ip.
func (l *pipeListener) dialFrom(ip string) net.Conn {
	s, client := net.Pipe()
	server := pipeConn{Conn: s, remote: &net.TCPAddr{IP: net.ParseIP(ip), Port: 40000}}
	go func() {
		select {
		case l.conns <- server:
		case <-l.done:
			server.Close()
		}
	}()
	return client
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error { l.once.Do(func() { close(l.done) }); return nil }

func (l *pipeListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 7373} }

// servedAtOnce serves srv behind its connection limit (Server.Limit) on in-memory connections,
// dials n connections that each send the start of a request and stop, and returns how many the
// server held at once when nothing more could move; then it closes one of them and returns how
// many the server had taken in all once nothing could move again (the limit frees a place for
// the next in line). Simulated time: no sleep decides anything.
func servedAtOnce(t *testing.T, srv *lan.Server, n int) (held, taken int) {
	synctest.Test(t, func(t *testing.T) {
		ln := newPipeListener()
		var mu sync.Mutex
		var served []net.Conn
		open := 0
		hs := &http.Server{Handler: srv.Handler(), ConnState: func(c net.Conn, st http.ConnState) {
			mu.Lock()
			defer mu.Unlock()
			switch st {
			case http.StateNew:
				open++
				served = append(served, c)
			case http.StateClosed, http.StateHijacked:
				open--
			}
		}}
		done := make(chan error, 1)
		go func() { done <- hs.Serve(srv.Limit(ln)) }()
		var clients []net.Conn
		for range n {
			c := ln.dial()
			clients = append(clients, c)
			go fmt.Fprint(c, "POST /v2/envelopes HTTP/1.1\r\n") // a header never finished
		}
		synctest.Wait()
		mu.Lock()
		held = open
		first := served[0]
		mu.Unlock()
		first.Close()
		synctest.Wait()
		mu.Lock()
		taken = len(served)
		mu.Unlock()
		hs.Close()
		ln.Close()
		for _, c := range clients {
			c.Close()
		}
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve = %v", err)
		}
	})
	return held, taken
}

// The connection limit: with MaxConns 4 and 20 connections that never finish their header, the
// server holds exactly 4; when one goes, it takes exactly one more.
func TestLANConnectionLimit(t *testing.T) {
	srv := lan.NewServer(&fakeHost{me: key(t, 1), alpha: key(t, 2)}, lan.ServerOptions{MaxConns: 4})
	if held, taken := servedAtOnce(t, srv, 20); held != 4 || taken != 5 {
		t.Fatalf("held %d at once and took %d in all, want 4 and 5", held, taken)
	}
}
