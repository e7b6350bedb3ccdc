package main

import (
	"bufio"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"testing"

	"github.com/agentmbx/agentmbx/host"
	"github.com/agentmbx/agentmbx/lan"
)

// TestPairServerBoundsConnectionsPerAddress: the pairing server of `agentmbx pair` without a
// daemon holds at most lan.DefaultMaxConnsPerAddr connections from one address. Three times that
// many connections from 127.0.0.2 each send a request and then sit idle on the kept-alive
// connection: exactly the bound of them is answered, the rest are closed unanswered, and a peer
// at 127.0.0.1 is served meanwhile. (Its idle and header timeouts are lan.NewHTTPServer's, which
// package lan tests on simulated time.)
func TestPairServerBoundsConnectionsPerAddress(t *testing.T) {
	home := filepath.Join(t.TempDir(), "desk")
	if err := host.Init(home, host.InitOptions{Host: "desk"}); err != nil {
		t.Fatal(err)
	}
	h, err := host.Open(home, &host.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	stop, addr, err := servePairLAN(h, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()

	const flood = 3 * lan.DefaultMaxConnsPerAddr
	type result struct {
		answered bool
		err      error
	}
	results := make(chan result, flood)
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}
	var conns []net.Conn
	for range flood {
		c, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		go func() {
			// A closed connection may fail the write or the read; either way it is unanswered.
			if _, err := fmt.Fprintf(c, "GET /v2/pair/hello HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
				results <- result{err: err}
				return
			}
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err == nil {
				resp.Body.Close() // the connection stays open, idle
			}
			results <- result{answered: err == nil, err: err}
		}()
	}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	answered := 0
	for range flood {
		if r := <-results; r.answered {
			answered++
		}
	}
	if answered != lan.DefaultMaxConnsPerAddr {
		t.Fatalf("%d of %d connections from one address were answered, want %d", answered, flood, lan.DefaultMaxConnsPerAddr)
	}
	resp, err := http.Get("http://" + addr + "/v2/pair/hello")
	if err != nil {
		t.Fatalf("a peer at another address, during the flood: %v", err)
	}
	resp.Body.Close()
}
