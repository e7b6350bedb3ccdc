package relaybench

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/relayserver"
	"github.com/agentmbx/agentmbx/relayserver/sqlitestore"
)

// phase is what one load run measured.
type phase struct {
	items     int64         // items accepted
	wireBytes int64         // their wire bytes
	elapsed   time.Duration // wall time of the load
	cpu       time.Duration // process CPU time during the load (0 when unknown)
	commits   int64         // write transactions committed during the load
	units     int64         // units (push requests) they carried
	diskBytes int64         // the store's size on disk after the load
}

// benchRelay is a relay over a fresh store, served on loopback.
type benchRelay struct {
	store  *sqlitestore.Store
	srv    *relayserver.Server
	http   *http.Server
	base   string
	client *http.Client
	served chan error
}

// startRelay opens a store in dir (MaxGroup 1 commits every unit on its own) and serves a relay
// over it on 127.0.0.1 with the quotas and rates lifted out of the load's way.
func startRelay(ctx context.Context, dir string, key mbx.SigningKey, maxGroup, conns int) (*benchRelay, error) {
	st, err := sqlitestore.Open(ctx, dir, &sqlitestore.Options{MaxGroup: maxGroup})
	if err != nil {
		return nil, err
	}
	lim := mbx.DefaultLimits()
	lim.MaxQueueItems, lim.MaxSenderItems, lim.MaxOwnerItems = 1<<40, 1<<40, 1<<40
	lim.MaxQueueBytes, lim.MaxSenderBytes, lim.MaxOwnerBytes = 1<<50, 1<<50, 1<<50
	srv, err := relayserver.New(ctx, st, relayserver.Options{Key: key, Limits: lim,
		PushesPerMinute: -1, EnrolCallsPerMinute: -1, NewEnrolmentsPerDay: -1, MaxPerClient: 1 << 20, Version: "bench"})
	if err != nil {
		st.Close()
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		st.Close()
		return nil, err
	}
	r := &benchRelay{store: st, srv: srv, base: "http://" + ln.Addr().String(),
		http:   &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second},
		client: &http.Client{Transport: &http.Transport{MaxIdleConns: 2 * conns, MaxIdleConnsPerHost: conns}},
		served: make(chan error, 1)}
	go func() { r.served <- r.http.Serve(ln) }()
	return r, nil
}

// stop shuts the relay down and closes its store (which checkpoints the WAL into the database).
func (r *benchRelay) stop() error {
	r.srv.Shutdown()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := r.http.Shutdown(ctx)
	if serr := <-r.served; !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	r.client.CloseIdleConnections()
	return errors.Join(err, r.store.Close())
}

// benchHost is a synthetic host: a name and a key.
type benchHost struct {
	name string
	key  mbx.SigningKey
}

func newHosts(prefix string, n int) ([]benchHost, error) {
	hs := make([]benchHost, n)
	for i := range hs {
		k, err := mbx.GenerateSigningKey(rand.Reader)
		if err != nil {
			return nil, err
		}
		hs[i] = benchHost{name: prefix + strconv.Itoa(i), key: k}
	}
	return hs, nil
}

// call sends one request to the relay, signed as a v2 hop by h when h is not nil, and returns
// the status and the answer.
func (r *benchRelay) call(ctx context.Context, h *benchHost, method, path string, body []byte) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, r.base+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	if h != nil {
		for k, v := range mbx.SignRelayHop(h.key, h.name, method, path, body, time.Now(), true) {
			req.Header[k] = v
		}
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := r.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	return resp.StatusCode, out, err
}

// enrol enrols h through the relay's challenge and enrol endpoints, as a host would.
func (r *benchRelay) enrol(ctx context.Context, h benchHost) error {
	body, _ := json.Marshal(mbx.ChallengeRequest{Host: h.name, Pubkey: h.key.PublicKey()})
	code, out, err := r.call(ctx, nil, "POST", "/v2/relay/challenge", body)
	if err != nil || code != http.StatusOK {
		return fmt.Errorf("enrol %s: challenge: %d %s %v", h.name, code, clip(out), err)
	}
	var ch mbx.ChallengeResponse
	if err := json.Unmarshal(out, &ch); err != nil {
		return fmt.Errorf("enrol %s: challenge: %w", h.name, err)
	}
	req, err := mbx.SignEnrolment(h.key, h.name, ch.Challenge, "")
	if err != nil {
		return fmt.Errorf("enrol %s: %w", h.name, err)
	}
	body, _ = json.Marshal(req)
	code, out, err = r.call(ctx, nil, "POST", "/v2/relay/enrol", body)
	if err != nil || code != http.StatusOK {
		return fmt.Errorf("enrol %s: %d %s %v", h.name, code, clip(out), err)
	}
	return nil
}

// enrolAll enrols every host, a few at a time.
func (r *benchRelay) enrolAll(ctx context.Context, hs []benchHost) error {
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	errs := make([]error, len(hs))
	for i, h := range hs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			errs[i] = r.enrol(ctx, h)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// envelopeWire is a stand-in sealed envelope of about size bytes: the relay sees only its id and
// that enc is an object, so the sealed body is filler.
func envelopeWire(id string, size int) []byte {
	head := `{"v":3,"id":"` + id + `","enc":{"v":1,"alg":"x25519+xchacha20poly1305"},"body":"`
	pad := max(size-len(head)-2, 4)
	b := make([]byte, 0, len(head)+pad+2)
	b = append(b, head...)
	b = append(b, bytes.Repeat([]byte("A"), pad)...)
	return append(b, `"}`...)
}

// counters are the load's running totals, read by the progress line.
type counters struct {
	items, wire atomic.Int64
}

// pushLoop pushes batches of cfg.Batch items from me to the targets in turn until ctx ends. Every
// push must come back 200 with every item accepted.
func (r *benchRelay) pushLoop(ctx context.Context, cfg Config, me benchHost, targets []benchHost, c *counters) error {
	for n := 0; ctx.Err() == nil; n++ {
		items := make([]mbx.PushItem, cfg.Batch)
		var wire int64
		for i := range items {
			id := me.name + "-" + strconv.Itoa(n) + "-" + strconv.Itoa(i)
			w := envelopeWire(id, cfg.WireBytes)
			wire += int64(len(w))
			tgt := targets[(n*cfg.Batch+i)%len(targets)]
			items[i] = mbx.PushItem{Kind: "envelope", ItemID: id,
				Targets: []mbx.PushTarget{{HostPubkey: tgt.key.PublicKey(), WireB64: mbx.B64(w)}}}
		}
		body, err := json.Marshal(mbx.PushRequest{Items: items})
		if err != nil {
			return err
		}
		// The push is not cut short when the run ends: the item would still commit, uncounted.
		code, out, err := r.call(context.WithoutCancel(ctx), &me, "POST", "/v2/relay/items", body)
		if err != nil {
			return fmt.Errorf("push: %w", err)
		}
		if code != http.StatusOK || bytes.Count(out, []byte(`"status":"accepted"`)) != cfg.Batch {
			return fmt.Errorf("push: %d %s", code, clip(out))
		}
		c.items.Add(int64(cfg.Batch))
		c.wire.Add(wire)
	}
	return nil
}

// enrolled makes a fresh store in dir with the hosts enrolled, closes it and returns its size.
func enrolled(ctx context.Context, dir string, key mbx.SigningKey, hosts []benchHost) (int64, error) {
	r, err := startRelay(ctx, dir, key, 0, 8)
	if err != nil {
		return 0, err
	}
	err = r.enrolAll(ctx, hosts)
	if err = errors.Join(err, r.stop()); err != nil {
		return 0, err
	}
	return dbSize(dir), nil
}

// runLoad runs one load phase on a fresh store in dir: cfg.Pushers senders push for cfg.Duration
// to eight targets. progress, when set, is called with the items so far every few hundred ms.
func runLoad(ctx context.Context, cfg Config, dir string, maxGroup int, progress func(time.Duration, int64)) (phase, error) {
	var p phase
	key, err := mbx.GenerateSigningKey(rand.Reader)
	if err != nil {
		return p, err
	}
	pushers, err := newHosts("pusher-", cfg.Pushers)
	if err != nil {
		return p, err
	}
	targets, err := newHosts("target-", 8)
	if err != nil {
		return p, err
	}
	base, err := enrolled(ctx, dir, key, append(append([]benchHost{}, pushers...), targets...))
	if err != nil {
		return p, err
	}
	r, err := startRelay(ctx, dir, key, maxGroup, cfg.Pushers)
	if err != nil {
		return p, err
	}
	stopped := false
	defer func() {
		if !stopped {
			_ = r.stop()
		}
	}()

	var c counters
	loadCtx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()
	st0 := r.store.Stats()
	cpu0, _ := cpuTime()
	start := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, len(pushers))
	for i, me := range pushers {
		wg.Go(func() {
			if errs[i] = r.pushLoop(loadCtx, cfg, me, targets, &c); errs[i] != nil {
				cancel() // one failure ends the run
			}
		})
	}
	done := make(chan struct{})
	if progress != nil {
		go func() {
			t := time.NewTicker(250 * time.Millisecond)
			defer t.Stop()
			for {
				select {
				case <-done:
					return
				case <-t.C:
					progress(time.Since(start), c.items.Load())
				}
			}
		}()
	}
	wg.Wait()
	close(done)
	p.elapsed = time.Since(start)
	if cpu1, ok := cpuTime(); ok {
		p.cpu = cpu1 - cpu0
	}
	st1 := r.store.Stats()
	p.items, p.wireBytes = c.items.Load(), c.wire.Load()
	p.commits, p.units = st1.Commits-st0.Commits, st1.Units-st0.Units
	if err := errors.Join(errs...); err != nil {
		return p, err
	}
	if err := ctx.Err(); err != nil {
		return p, err
	}
	stopped = true
	if err := r.stop(); err != nil {
		return p, err
	}
	p.diskBytes = dbSize(dir) - base
	return p, nil
}

// dbSize is the size of the store's database in dir, its WAL included (none is left once the
// store is closed); the ballast and lock files beside it are not the items' cost.
func dbSize(dir string) int64 {
	var n int64
	for _, name := range []string{sqlitestore.DBFile, sqlitestore.DBFile + "-wal"} {
		if fi, err := os.Stat(filepath.Join(dir, name)); err == nil {
			n += fi.Size()
		}
	}
	return n
}

func clip(b []byte) string {
	if len(b) > 300 {
		return string(b[:300]) + "…"
	}
	return string(b)
}
