package lan_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/agentmbx/agentmbx/lan"
	"github.com/agentmbx/agentmbx/mbx"
)

// connWorld serves a LAN server with its default bounds on in-memory connections inside a
// synctest bubble, counting the connections the server holds.
type connWorld struct {
	ln   *pipeListener
	hs   *http.Server
	mu   sync.Mutex
	open int
	done chan error
}

func newConnWorld(t *testing.T) *connWorld {
	srv := lan.NewServer(&fakeHost{me: key(t, 1), alpha: key(t, 2)},
		lan.ServerOptions{Logger: slog.New(slog.DiscardHandler), Version: "test"})
	w := &connWorld{ln: newPipeListener(), done: make(chan error, 1)}
	w.hs = lan.NewHTTPServer(srv.Handler())
	w.hs.ConnState = func(_ net.Conn, st http.ConnState) {
		w.mu.Lock()
		defer w.mu.Unlock()
		switch st {
		case http.StateNew:
			w.open++
		case http.StateClosed, http.StateHijacked:
			w.open--
		}
	}
	go func() { w.done <- w.hs.Serve(srv.Limit(w.ln)) }()
	t.Cleanup(func() { w.close(t) }) // inside the bubble, also when the test fails
	return w
}

func (w *connWorld) held() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.open
}

func (w *connWorld) close(t *testing.T) {
	w.hs.Close() // every connection, both ends of its pipe
	w.ln.Close()
	if err := <-w.done; !errors.Is(err, http.ErrServerClosed) {
		t.Errorf("Serve = %v", err)
	}
}

// status asks GET /v2/status on c, as a peer's probe does, and returns the answer's code.
func status(t *testing.T, c net.Conn, br *bufio.Reader) int {
	t.Helper()
	go fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", mbx.PathLANStatus)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// TestLANIdleFloodFromOneAddressLeavesPeerServed: 200 connections from one address that never
// send a byte hold 8 places (DefaultMaxConnsPerAddr) of the 64, the rest are closed as they
// come, and a peer at another address is answered at once: no simulated time passes, so no
// timeout had to free a place for it. (Without the per-address bound the flood holds all 64
// and the peer waits for the header timeout.)
func TestLANIdleFloodFromOneAddressLeavesPeerServed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newConnWorld(t)
		var flood []net.Conn
		for range 200 {
			flood = append(flood, w.ln.dialFrom("127.0.9.9"))
		}
		synctest.Wait()
		if got := w.held(); got != lan.DefaultMaxConnsPerAddr {
			t.Fatalf("the flood holds %d connections, want %d", got, lan.DefaultMaxConnsPerAddr)
		}
		start := time.Now()
		peer := w.ln.dialFrom("127.0.0.1")
		if code := status(t, peer, bufio.NewReader(peer)); code != http.StatusOK {
			t.Fatalf("the peer's status = %d", code)
		}
		if waited := time.Since(start); waited != 0 {
			t.Fatalf("the peer was answered after %v of simulated time: it waited for a place", waited)
		}
		closed := 0
		for _, c := range flood {
			_ = c.SetReadDeadline(time.Now())
			if _, err := c.Read(make([]byte, 1)); errors.Is(err, io.EOF) || errors.Is(err, io.ErrClosedPipe) {
				closed++
			}
			c.Close()
		}
		if closed != 200-lan.DefaultMaxConnsPerAddr {
			t.Errorf("%d flood connections closed by the server, want %d", closed, 200-lan.DefaultMaxConnsPerAddr)
		}
		peer.Close()
	})
}

// TestLANIdleConnectionsTimeOut: a flood from many addresses that fills every place with
// connections that never send a byte keeps a peer waiting only until HeaderTimeout closes them;
// a kept-alive connection with no second request is closed after IdleTimeout.
func TestLANIdleConnectionsTimeOut(t *testing.T) {
	// As docs/security.md states them.
	if lan.DefaultMaxConnsPerAddr != 8 || lan.HeaderTimeout != 10*time.Second || lan.IdleTimeout != 30*time.Second {
		t.Fatalf("per address %d, header timeout %v, idle timeout %v: docs/security.md says 8, 10s and 30s",
			lan.DefaultMaxConnsPerAddr, lan.HeaderTimeout, lan.IdleTimeout)
	}
	synctest.Test(t, func(t *testing.T) {
		w := newConnWorld(t)
		var flood []net.Conn
		for range lan.DefaultMaxConns + 16 {
			flood = append(flood, w.ln.dial()) // each from an address of its own
		}
		synctest.Wait()
		if got := w.held(); got != lan.DefaultMaxConns {
			t.Fatalf("the flood holds %d connections, want %d", got, lan.DefaultMaxConns)
		}
		start := time.Now()
		peer := w.ln.dialFrom("127.0.0.1")
		br := bufio.NewReader(peer)
		if code := status(t, peer, br); code != http.StatusOK {
			t.Fatalf("the peer's status = %d", code)
		}
		if waited := time.Since(start); waited < lan.HeaderTimeout || waited > lan.HeaderTimeout+time.Second {
			t.Fatalf("the peer was answered after %v of simulated time, want the header timeout %v", waited, lan.HeaderTimeout)
		}
		for _, c := range flood {
			c.Close()
		}
		// The peer's connection is kept alive; with no second request it is closed after
		// IdleTimeout.
		start = time.Now()
		if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
			t.Fatalf("idle kept-alive connection: read = %v, want EOF", err)
		}
		if idle := time.Since(start); idle < lan.IdleTimeout || idle > lan.IdleTimeout+time.Second {
			t.Fatalf("the idle connection was closed after %v of simulated time, want %v", idle, lan.IdleTimeout)
		}
		peer.Close()
	})
}
