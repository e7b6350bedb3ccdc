package host

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/internal/logkey"
	"github.com/agentmbx/agentmbx/lan"
	"github.com/agentmbx/agentmbx/relaylink"
	"github.com/agentmbx/agentmbx/rotation"
)

// DefaultTick is the daemon's tick: an outbox pass and a sweep at least this often.
const DefaultTick = 5 * time.Second

// DefaultLANRetry is the first wait before a failed LAN bind is retried.
const DefaultLANRetry = 2 * time.Second

// DefaultRelayWait is the long-poll wait the daemon's receiver asks the relay for
// (relaylink.DefaultWait).
const DefaultRelayWait = relaylink.DefaultWait

// DaemonOptions configure RunDaemon.
type DaemonOptions struct {
	// Listen is the LAN listen address (host:port); default the one init recorded, else :7373.
	Listen string
	// Tick is how often the outbox loop runs without being woken (default DefaultTick).
	Tick time.Duration
	// AddrFile, when set, receives the bound LAN address (host:port, an unspecified IP written as
	// 127.0.0.1) once the daemon listens on the LAN (written late when the bind had to be retried): tests and scripts read the port of --listen :0 there.
	AddrFile string
	// Options are the options the host is opened with (nil: defaults).
	Options *Options
	// RelayWait is the long-poll wait of the relay receiver's pulls (default DefaultRelayWait;
	// negative: none, the receiver then pulls every Tick).
	RelayWait time.Duration
	// Ready, when set, is called with the open host once the control socket serves (and the LAN
	// listener, unless its bind failed: it is then retried in the background).
	Ready func(h *Host)
	// LANRetry is the first wait before a failed LAN bind is tried again (default
	// DefaultLANRetry); later waits grow, jittered, up to a minute.
	LANRetry time.Duration
}

// RunDaemon runs a host daemon on the home dir until ctx is done (the program's main ends ctx on
// SIGTERM or SIGINT; the library traps no signal itself): the LAN server, the outbox loop (passes, receipts, sweeps and alerts), the relay loops
// (when a relay is pinned: enrolment, publications and the receiver) and the control
// socket <dir>/agentmbx.sock (mode 0600) that commands and the SDK talk to. It holds the store's
// lock the whole time, except while it rotates the host's keys (RotateKeys: the store is closed
// for the local part of the rotation, then opened again, the listeners serving throughout). On
// the way out it stops taking requests, wakes long polls, waits for the sends in flight and
// closes the store; it returns nil after a clean shutdown.
func RunDaemon(ctx context.Context, dir string, opts DaemonOptions) (err error) {
	o := Options{LockTimeout: 200 * time.Millisecond}
	if opts.Options != nil {
		o = *opts.Options
		if o.LockTimeout <= 0 {
			o.LockTimeout = 200 * time.Millisecond
		}
	}
	h, err := Open(dir, &o)
	if err != nil {
		return err // Open's error names the home already (and wraps api.ErrLocked when a daemon runs)
	}
	defer func() {
		if h == nil {
			return // a rotation closed it and could not open it again
		}
		if cerr := h.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	tick := opts.Tick
	if tick <= 0 {
		tick = DefaultTick
	}
	listen := opts.Listen
	if listen == "" {
		listen = h.ListenAddr()
	}
	if listen == "" {
		listen = DefaultListen
	}
	if _, _, err := splitListen(listen); err != nil {
		return fmt.Errorf("host: daemon: listen: %w: %v", api.ErrInvalid, err)
	}
	sockPath := filepath.Join(dir, api.SocketName)
	// We hold the store's lock, so a socket file left here is a dead daemon's.
	if err := os.Remove(sockPath); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("host: daemon: stale control socket: %w", err)
	}
	sockLn, err := net.Listen("unix", sockPath)
	if err != nil {
		return fmt.Errorf("host: daemon: control socket: %w", err)
	}
	defer os.Remove(sockPath)
	defer sockLn.Close()
	if err := os.Chmod(sockPath, 0o600); err != nil {
		return fmt.Errorf("host: daemon: control socket: %w", err)
	}
	// stopCtx ends on ctx or on StopDaemon (the control socket's POST /v1/daemon/stop).
	stopCtx, stopDaemon := context.WithCancel(ctx)
	defer stopDaemon()
	run := &daemonRun{started: h.clock(), stop: stopDaemon, rotate: make(chan rotateRequest)}
	// The listeners serve the open host through gates, so that a key rotation can swap it.
	var sockGate, lanGate swapGate
	lanSrv := lan.NewHTTPServer(&lanGate)
	sockSrv := &http.Server{Handler: &sockGate, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 2)
	bindCtx, cancelBind := context.WithCancel(ctx)
	defer cancelBind()
	lb := h.newBinding(listen, opts, lanSrv, errc)
	relayWait := opts.RelayWait
	if relayWait == 0 {
		relayWait = DefaultRelayWait
	}
	relayWait = max(relayWait, 0)
	stopLoops := h.serveDaemon(ctx, run, lb, tick, relayWait, &sockGate, &lanGate)
	go func() { errc <- serveErr("control socket", sockSrv.Serve(sockLn)) }()
	bindDone := make(chan struct{})
	if err := lb.Bind(); err != nil {
		h.log.Warn("LAN listener: bind failed; the daemon runs without it (local and relay mail go on) and retries",
			logkey.LAN, listen, logkey.Err, err)
		go func() {
			defer close(bindDone)
			lb.Retry(bindCtx)
		}()
	} else {
		close(bindDone)
	}
	bound, _, _ := lb.State()
	h.log.Info("daemon running", logkey.Host, h.name, logkey.Fingerprint, h.Key().Fingerprint(), logkey.LAN, bound, logkey.Socket, sockPath)
	if opts.Ready != nil {
		opts.Ready(h)
	}

	var runErr error
serve:
	for {
		select {
		case <-stopCtx.Done():
			break serve
		case runErr = <-errc:
			break serve
		case req := <-run.rotate:
			// The local part of a key rotation, with the store closed: the same steps as
			// `id rotate` without a daemon (PrepareRotation), the same crash guarantees.
			sockGate.hold()
			lanGate.hold()
			stopLoops()
			h.mail.Close() // long polls answer now
			sockGate.drain()
			lanGate.drain()
			h.mu.Lock()
			h.daemon, h.bind, h.run = false, nil, nil
			h.mu.Unlock()
			if cerr := h.Close(); cerr != nil {
				h.log.Error("closing the store for a key rotation", logkey.Err, cerr)
			}
			logger := h.log
			h = nil
			_, perr := PrepareRotation(dir, rotation.Options{Rand: o.Rand, Clock: o.Clock})
			h2, oerr := Open(dir, &o)
			if oerr != nil {
				req.reply <- rotateAnswer{err: fmt.Errorf("host: daemon: opening the store again after the key rotation: %w", oerr)}
				sockGate.set(nil, errRotationReopen)
				lanGate.set(nil, errRotationReopen)
				runErr = oerr
				logger.Error("opening the store again after a key rotation: the daemon stops; its next start finishes the rotation", logkey.Err, oerr)
				break serve
			}
			h = h2
			stopLoops = h.serveDaemon(ctx, run, lb, tick, relayWait, &sockGate, &lanGate)
			if opts.Ready != nil {
				opts.Ready(h)
			}
			if perr != nil {
				req.reply <- rotateAnswer{err: perr}
				continue
			}
			st, serr := h.rot.Status()
			h.log.Info("host keys rotated: the daemon tells the peers and the relay", logkey.Fingerprint, h.Key().Fingerprint())
			req.reply <- rotateAnswer{rotation: st, err: serr}
		}
	}
	if h == nil {
		return runErr
	}
	h.log.Info("daemon stopping")
	cancelBind()
	stopLoops()
	<-bindDone     // no bind after the LAN server's shutdown below
	h.mail.Close() // long polls (Wait) answer now
	shutCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := lanSrv.Shutdown(shutCtx); err != nil {
		lanSrv.Close()
	}
	if err := sockSrv.Shutdown(shutCtx); err != nil {
		sockSrv.Close()
	}
	h.sends.Wait()
	h.mu.Lock()
	h.daemon, h.bind, h.run = false, nil, nil
	h.mu.Unlock()
	h.log.Info("daemon stopped")
	return runErr
}

// serveDaemon makes h the daemon's host: it records the run and the LAN binding, starts the
// loops (the relay's, the rotation's, the probes and the outbox loop) and opens the gates to
// h's handlers. The returned func stops the loops and waits for them and the sends in flight.
func (h *Host) serveDaemon(ctx context.Context, run *daemonRun, lb *lan.Binding, tick, relayWait time.Duration,
	sockGate, lanGate *swapGate) (stop func()) {
	h.mu.Lock()
	h.daemon, h.run, h.bind = true, run, lb
	h.mu.Unlock()
	loopCtx, cancelLoop := context.WithCancel(ctx)
	loopDone := make(chan struct{})
	h.probes.Start(loopCtx)
	h.probeWaiting(loopCtx)
	go func() {
		defer close(loopDone)
		defer h.probes.Stop()
		var wg sync.WaitGroup
		wg.Add(2)
		go func() {
			defer wg.Done()
			h.relay.Run(loopCtx, tick, relayWait)
		}()
		go func() {
			defer wg.Done()
			h.rot.Run(loopCtx) // this host's key rotation, when one is not done
		}()
		h.runOutbox(loopCtx, tick)
		wg.Wait()
	}()
	sockGate.set(controlHandler(h), nil)
	lanGate.set(h.lanSrv.Handler(), nil)
	return func() {
		cancelLoop()
		<-loopDone
		h.sends.Wait()
	}
}

func serveErr(what string, err error) error {
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return fmt.Errorf("host: daemon: %s: %w", what, err)
}

// newBinding is the daemon's LAN listener (package lan), serving lanSrv once bound; the host
// reads its state (status, the port hint) while the daemon runs.
func (h *Host) newBinding(listen string, opts DaemonOptions, lanSrv *http.Server, errc chan<- error) *lan.Binding {
	first := opts.LANRetry
	if first <= 0 {
		first = DefaultLANRetry
	}
	b := lan.NewBinding(lan.BindConfig{Addr: listen, AddrFile: opts.AddrFile, FirstRetry: first, Logger: h.log,
		Serve: func(ln net.Listener) {
			go func() { errc <- serveErr("LAN server", lanSrv.Serve(h.lanSrv.Limit(ln))) }()
		}})
	h.mu.Lock()
	h.bind = b
	h.mu.Unlock()
	return b
}
