package host

import (
	"context"
	"net"
	"net/http"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/agentmbx/agentmbx/internal/fsutil"
	"github.com/agentmbx/agentmbx/internal/logkey"
)

// A daemon whose LAN port cannot be bound keeps serving the control socket, local mail and the
// relay; it records why in lanErr (status and doctor show it) and retries the bind with jittered
// exponential backoff until it succeeds or the daemon stops.

// lanBindBackoff is the schedule of LAN bind retries (capped; jitter ±30%; never gives up).
func lanBindBackoff(ctx context.Context, first time.Duration) backoff.BackOff {
	b := backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(first),
		backoff.WithMaxInterval(time.Minute),
		backoff.WithRandomizationFactor(0.3),
		backoff.WithMaxElapsedTime(0))
	return backoff.WithContext(b, ctx)
}

// lanBinder binds the LAN listener and serves it on srv.
type lanBinder struct {
	h        *Host
	addr     string
	addrFile string
	srv      *http.Server
	errc     chan<- error
	first    time.Duration // the first retry wait
}

// bind tries once; on success it records the bound address and starts serving.
func (b *lanBinder) bind() error {
	ln, err := net.Listen("tcp", b.addr)
	if err != nil {
		b.h.mu.Lock()
		b.h.lanErr = err.Error()
		b.h.mu.Unlock()
		return err
	}
	tcp := ln.Addr().(*net.TCPAddr)
	bound := dialable(tcp)
	if b.addrFile != "" {
		if err := fsutil.WriteFileAtomic(b.addrFile, []byte(bound+"\n"), 0o644); err != nil {
			ln.Close()
			b.h.mu.Lock()
			b.h.lanErr = "addr file: " + err.Error()
			b.h.mu.Unlock()
			return err
		}
	}
	b.h.mu.Lock()
	b.h.bound, b.h.lanPort, b.h.lanErr = bound, tcp.Port, ""
	b.h.mu.Unlock()
	go func() { b.errc <- serveErr("LAN server", b.srv.Serve(b.h.lanSrv.Limit(ln))) }()
	return nil
}

// retry binds with backoff until it succeeds or ctx ends (the daemon stops). The first try was
// made before; the first retry comes after b.first, jittered.
func (b *lanBinder) retry(ctx context.Context) {
	bo := lanBindBackoff(ctx, b.first)
	for attempt := 2; ; attempt++ {
		d := bo.NextBackOff()
		if d == backoff.Stop {
			return // ctx ended
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		err := b.bind()
		if err == nil {
			b.h.log.Info("LAN listener bound", logkey.LAN, b.addr, logkey.Attempts, attempt)
			return
		}
		b.h.log.Warn("LAN listener: bind failed, retrying; local and relay mail go on",
			logkey.LAN, b.addr, logkey.Attempts, attempt, logkey.Err, err)
	}
}
