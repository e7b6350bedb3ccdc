package pgstore

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"

	"github.com/agentmbx/agentmbx/internal/logkey"
)

// Subscribe implements relayserver.Notifier: fn receives the target key of every item committed
// by any process on the database (through LISTEN/NOTIFY, sent on commit), and "" when
// notifications may have been missed: after the listening connection was (re)established, and
// every Options.Recheck as a bounded re-check. While anyone is subscribed, the store holds the
// shared "serving" lock that makes RotateEpoch refuse. cancel ends the subscription.
func (s *Store) Subscribe(fn func(target string)) (cancel func()) {
	return s.lis.subscribe(fn)
}

// listener owns the LISTEN connection, started with the first subscriber.
type listener struct {
	cfg     *pgx.ConnConfig
	recheck time.Duration
	log     *slog.Logger

	mu      sync.Mutex
	subs    map[int]func(string)
	next    int
	stopped bool
	cancel  context.CancelFunc
	done    chan struct{}
}

func newListener(cfg *pgx.ConnConfig, o Options) *listener {
	c := cfg.Copy()
	// A wait for notifications ends by deadline alone: no cancel request to the server.
	c.BuildContextWatcherHandler = func(pc *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.DeadlineContextWatcherHandler{Conn: pc.Conn()}
	}
	return &listener{cfg: c, recheck: o.Recheck, log: o.Logger, subs: map[int]func(string){}}
}

func (l *listener) subscribe(fn func(string)) func() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped {
		return func() {}
	}
	id := l.next
	l.next++
	l.subs[id] = fn
	if l.cancel == nil {
		ctx, cancel := context.WithCancel(context.Background())
		l.cancel, l.done = cancel, make(chan struct{})
		go l.run(ctx)
	}
	return func() {
		l.mu.Lock()
		delete(l.subs, id)
		l.mu.Unlock()
	}
}

func (l *listener) stop() {
	l.mu.Lock()
	l.stopped = true
	cancel, done := l.cancel, l.done
	l.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

func (l *listener) broadcast(target string) {
	l.mu.Lock()
	fns := make([]func(string), 0, len(l.subs))
	for _, fn := range l.subs {
		fns = append(fns, fn)
	}
	l.mu.Unlock()
	for _, fn := range fns {
		fn(target)
	}
}

// run keeps a listening session up until ctx ends, reconnecting with backoff, and re-checks
// every l.recheck.
func (l *listener) run(ctx context.Context) {
	defer close(l.done)
	go func() {
		t := time.NewTicker(l.recheck)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				l.broadcast("")
			}
		}
	}()
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		up, err := l.session(ctx)
		if ctx.Err() != nil {
			return
		}
		if up {
			backoff = 100 * time.Millisecond
		}
		l.log.Warn("relay database listener lost; reconnecting", logkey.Err, err, logkey.RetryIn, backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

// session listens on one connection until it fails. up reports whether it got as far as
// listening.
func (l *listener) session(ctx context.Context) (up bool, err error) {
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	conn, err := pgx.ConnectConfig(cctx, l.cfg)
	cancel()
	if err != nil {
		return false, fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "LISTEN "+notifyChannel); err != nil {
		return false, fmt.Errorf("listen: %w", err)
	}
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock_shared($1)", lockServing); err != nil {
		return false, fmt.Errorf("serving lock: %w", err)
	}
	// Whatever committed while no session listened has not been announced.
	l.broadcast("")
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return true, err
		}
		l.broadcast(n.Payload)
	}
}
