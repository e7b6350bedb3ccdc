package lan_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/lan"
)

// TestBindingRetriesUntilThePortIsFree: a taken port fails the first bind (State says why, no
// address file is written); once the port is freed a retry binds it, serves it, writes the
// address file and clears the failure.
func TestBindingRetriesUntilThePortIsFree(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := taken.Addr().String()
	served := make(chan net.Listener, 1)
	file := filepath.Join(t.TempDir(), "addr")
	b := lan.NewBinding(lan.BindConfig{Addr: addr, AddrFile: file, FirstRetry: 10 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Serve: func(ln net.Listener) { served <- ln }})
	if err := b.Bind(); err == nil {
		t.Fatal("bound a taken port")
	}
	if bound, port, why := b.State(); bound != "" || port != 0 || !strings.Contains(why, "address already in use") {
		t.Fatalf("State after a failed bind = %q %d %q", bound, port, why)
	}
	if _, err := os.Stat(file); !os.IsNotExist(err) {
		t.Fatalf("addr file written without a listener: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { defer close(done); b.Retry(ctx) }()
	taken.Close()
	var ln net.Listener
	select {
	case ln = <-served:
	case <-time.After(time.Minute):
		t.Fatal("the retry did not bind the freed port")
	}
	defer ln.Close()
	<-done
	bound, port, why := b.State()
	if bound != addr || port != ln.Addr().(*net.TCPAddr).Port || why != "" {
		t.Fatalf("State after the retry = %q %d %q; want %s", bound, port, why, addr)
	}
	if got, err := os.ReadFile(file); err != nil || strings.TrimSpace(string(got)) != addr {
		t.Fatalf("addr file = %q, %v", got, err)
	}
}

// TestBindingRetryEndsWithItsContext: a retry of a port that stays taken stops when the daemon
// stops.
func TestBindingRetryEndsWithItsContext(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	b := lan.NewBinding(lan.BindConfig{Addr: taken.Addr().String(), FirstRetry: 5 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Serve: func(ln net.Listener) { ln.Close() }})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); b.Retry(ctx) }()
	for i := 0; ; i++ { // a retry has failed
		if _, _, why := b.State(); why != "" {
			break
		}
		if i == 3000 {
			t.Fatal("no bind failure recorded")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("Retry did not end with its context")
	}
}

func TestDialable(t *testing.T) {
	for _, tt := range []struct {
		a    net.TCPAddr
		want string
	}{
		{net.TCPAddr{Port: 7373}, "127.0.0.1:7373"},
		{net.TCPAddr{IP: net.IPv6unspecified, Port: 1}, "127.0.0.1:1"},
		{net.TCPAddr{IP: net.ParseIP("10.0.0.2"), Port: 2}, "10.0.0.2:2"},
		{net.TCPAddr{IP: net.ParseIP("::1"), Port: 3}, "[::1]:3"},
	} {
		if got := lan.Dialable(&tt.a); got != tt.want {
			t.Errorf("lan.Dialable(%v) = %s, want %s", tt.a, got, tt.want)
		}
	}
}
