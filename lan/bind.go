package lan

import (
	"context"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/agentmbx/agentmbx/internal/fsutil"
	"github.com/agentmbx/agentmbx/internal/logkey"
)

// A daemon whose LAN port cannot be bound keeps serving the control socket, local mail and the
// relay; its Binding records why (State: status and doctor show it) and Retry binds again with
// jittered exponential backoff until it succeeds or the daemon stops.

// BindConfig configures a Binding.
type BindConfig struct {
	// Addr is the listen address (host:port).
	Addr string
	// AddrFile, when set, receives the bound address (Dialable) once the listener is bound.
	AddrFile string
	// Serve serves the bound listener; it must not block (start the server on its own goroutine).
	Serve func(net.Listener)
	// FirstRetry is the wait before the first retry; later ones grow, jittered, up to a minute.
	FirstRetry time.Duration
	// Logger receives the retries' outcomes.
	Logger *slog.Logger
}

// Binding binds the daemon's LAN listener. All methods are safe for concurrent use.
type Binding struct {
	cfg BindConfig

	mu    sync.Mutex
	bound string // the bound address, "" until bound
	port  int
	err   string // why the last bind failed, "" once bound
}

// NewBinding returns a Binding of cfg.Addr; nothing is bound until Bind.
func NewBinding(cfg BindConfig) *Binding { return &Binding{cfg: cfg} }

// State is the bound address and port ("" and 0 until bound), and why the last bind failed.
func (b *Binding) State() (bound string, port int, bindErr string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.bound, b.port, b.err
}

// Bind tries once; on success it records the bound address, writes the address file and serves.
func (b *Binding) Bind() error {
	ln, err := net.Listen("tcp", b.cfg.Addr)
	if err != nil {
		b.fail(err.Error())
		return err
	}
	tcp := ln.Addr().(*net.TCPAddr)
	bound := Dialable(tcp)
	if b.cfg.AddrFile != "" {
		if err := fsutil.WriteFileAtomic(b.cfg.AddrFile, []byte(bound+"\n"), 0o644); err != nil {
			ln.Close()
			b.fail("addr file: " + err.Error())
			return err
		}
	}
	b.mu.Lock()
	b.bound, b.port, b.err = bound, tcp.Port, ""
	b.mu.Unlock()
	b.cfg.Serve(ln)
	return nil
}

func (b *Binding) fail(why string) {
	b.mu.Lock()
	b.err = why
	b.mu.Unlock()
}

// bindBackoff is the schedule of bind retries (capped; jitter ±30%; never gives up).
func bindBackoff(ctx context.Context, first time.Duration) backoff.BackOff {
	bo := backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(first),
		backoff.WithMaxInterval(time.Minute),
		backoff.WithRandomizationFactor(0.3),
		backoff.WithMaxElapsedTime(0))
	return backoff.WithContext(bo, ctx)
}

// Retry binds with backoff until it succeeds or ctx ends (the daemon stops). The first try was
// made before (Bind); the first retry comes after FirstRetry, jittered.
func (b *Binding) Retry(ctx context.Context) {
	bo := bindBackoff(ctx, b.cfg.FirstRetry)
	for attempt := 2; ; attempt++ {
		d := bo.NextBackOff()
		if d == backoff.Stop || !sleep(ctx, d) {
			return // ctx ended
		}
		err := b.Bind()
		if err == nil {
			b.cfg.Logger.Info("LAN listener bound", logkey.LAN, b.cfg.Addr, logkey.Attempts, attempt)
			return
		}
		b.cfg.Logger.Warn("LAN listener: bind failed, retrying; local and relay mail go on",
			logkey.LAN, b.cfg.Addr, logkey.Attempts, attempt, logkey.Err, err)
	}
}

// sleep waits d, or less when ctx ends first (it then returns false).
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// Dialable is a bound address as a peer on this machine can dial it (an unspecified IP as
// 127.0.0.1).
func Dialable(a *net.TCPAddr) string {
	ip := a.IP
	if ip == nil || ip.IsUnspecified() {
		return net.JoinHostPort("127.0.0.1", strconv.Itoa(a.Port))
	}
	return net.JoinHostPort(ip.String(), strconv.Itoa(a.Port))
}
