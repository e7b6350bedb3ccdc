package relaybench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/agentmbx/agentmbx/checkpoint"
	"github.com/agentmbx/agentmbx/mbx"
)

// EnvLoader, set in a process's environment, marks it as a load child of `relay bench --parked`:
// the command re-executes its own binary with it and runs RunLoader there.
const EnvLoader = "AGENTMBX_RELAY_BENCH_LOADER"

// loaderConfig is what one load child is told: which hosts are its own (lo..hi-1, keys derived
// from Seed), where to park and push, and the push phase's rate and length.
type loaderConfig struct {
	Seed        []byte   `json:"seed"`
	Lo          int      `json:"lo"`
	Hi          int      `json:"hi"`
	ParkURL     string   `json:"park_url"`
	PushURLs    []string `json:"push_urls"`
	Source      string   `json:"source"`
	WaitSeconds int      `json:"wait_seconds"`
	Epoch       string   `json:"epoch"`
	Rate        float64  `json:"rate"`
	PushSeconds float64  `json:"push_seconds"`
	// Restart: polls answered with a retry hint come back after it, jittered, as hosts do.
	Restart bool `json:"restart"`
}

// loaderCommand is one line the coordinator sends: first the config, then the order to push.
type loaderCommand struct {
	Config *loaderConfig `json:"config,omitempty"`
	Push   bool          `json:"push,omitempty"`
}

// loaderReport is one line a child sends back: an error, or its push phase's wake times in ms
// (Cross: of pushes sent to another replica than the one its polls park on).
type loaderReport struct {
	Err   string    `json:"err,omitempty"`
	Wakes []float64 `json:"wakes,omitempty"`
	Cross []float64 `json:"cross,omitempty"`
}

// RunLoader is the body of a load child: it reads its config from in, parks one long poll per
// host (re-issued as each returns, as a host's pull loop does), pushes when told to and writes
// the wake times to out, and returns when in closes.
func RunLoader(ctx context.Context, in io.Reader, out io.Writer) error {
	if _, err := raiseNoFile(); err != nil {
		return err
	}
	dec := json.NewDecoder(in)
	enc := json.NewEncoder(out)
	var first loaderCommand
	if err := dec.Decode(&first); err != nil || first.Config == nil {
		return fmt.Errorf("relaybench loader: no config on stdin (%v)", err)
	}
	cfg := *first.Config
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	l := &loader{cfg: cfg, recv: map[string]time.Time{}, fail: make(chan error, 1)}
	if err := l.init(); err != nil {
		return err
	}
	go l.parkAll(ctx)
	cmds := make(chan loaderCommand)
	go func() {
		defer close(cmds)
		for {
			var c loaderCommand
			if err := dec.Decode(&c); err != nil {
				return
			}
			cmds <- c
		}
	}()
	for {
		select {
		case err := <-l.fail:
			_ = enc.Encode(loaderReport{Err: err.Error()})
			return err
		case c, ok := <-cmds:
			if !ok {
				return nil // the coordinator is done
			}
			if c.Push {
				rep, err := l.pushPhase(ctx)
				if err != nil {
					rep.Err = err.Error()
				}
				if err := enc.Encode(rep); err != nil {
					return err
				}
			}
		}
	}
}

// loader is one child's hosts and what they received.
type loader struct {
	cfg    loaderConfig
	keys   []mbx.SigningKey
	host   string // the Host header of the park URL
	dialer *net.Dialer
	push   *http.Client

	mu   sync.Mutex
	recv map[string]time.Time // item id → when its poll received it

	fail chan error
}

func (l *loader) init() error {
	u, err := url.Parse(l.cfg.ParkURL)
	if err != nil {
		return err
	}
	l.host = u.Host
	src, err := net.ResolveTCPAddr("tcp", l.cfg.Source+":0")
	if err != nil {
		return err
	}
	l.dialer = &net.Dialer{LocalAddr: src, Timeout: 30 * time.Second}
	l.push = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DialContext: l.dialer.DialContext,
		MaxIdleConns: 256, MaxIdleConnsPerHost: 128}}
	l.keys = make([]mbx.SigningKey, l.cfg.Hi-l.cfg.Lo)
	for i := range l.keys {
		l.keys[i] = benchKey(l.cfg.Seed, l.cfg.Lo+i)
	}
	return nil
}

func (l *loader) failed(err error) {
	select {
	case l.fail <- err:
	default:
	}
}

// parkAll starts every host's poll loop, a few connections opening at a time.
func (l *loader) parkAll(ctx context.Context) {
	sem := make(chan struct{}, 64)
	for i := range l.keys {
		select {
		case <-ctx.Done():
			return
		case sem <- struct{}{}:
		}
		go l.pollLoop(ctx, i, sem)
	}
}

// pollLoop holds host i's long poll on one keep-alive connection: it sends the pull a host's
// receive loop sends, reads the answer, records the items' arrival and pulls again after them.
func (l *loader) pollLoop(ctx context.Context, i int, sem chan struct{}) {
	// Each host its own client address, as hosts on the internet are.
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: hostSource(l.cfg.Lo + i)}, Timeout: 30 * time.Second}
	conn, err := d.DialContext(ctx, "tcp", l.host)
	if err != nil {
		<-sem
		l.failed(fmt.Errorf("dial: %w", err))
		return
	}
	defer func() { conn.Close() }()
	go func() { <-ctx.Done(); _ = conn.Close() }()
	br := bufio.NewReader(conn)
	key, name := l.keys[i], benchName(l.cfg.Lo+i)
	after := int64(0)
	first := true
	for ctx.Err() == nil {
		q := "after=" + strconv.FormatInt(after, 10)
		if after > 0 {
			q += "&epoch=" + url.QueryEscape(l.cfg.Epoch)
		}
		path := "/v2/relay/items?" + q + "&wait=" + strconv.Itoa(l.cfg.WaitSeconds)
		req, _ := http.NewRequest("GET", "http://"+l.host+path, nil)
		for k, v := range mbx.SignRelayHop(key, name, "GET", path, nil, time.Now(), true) {
			req.Header[k] = v
		}
		if err := req.Write(conn); err != nil {
			l.failedUnlessDone(ctx, fmt.Errorf("poll: %w", err))
			return
		}
		if first {
			<-sem
			first = false
		}
		resp, err := http.ReadResponse(br, req)
		if err != nil {
			l.failedUnlessDone(ctx, fmt.Errorf("poll: %w", err))
			return
		}
		body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
		resp.Body.Close()
		at := time.Now()
		if err == nil && resp.StatusCode == http.StatusServiceUnavailable {
			// Busy: come back after the hint, jittered, as a host's receive loop does, on a new
			// connection (as Go's client would find the idle one closed by then).
			hint, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
			hint = max(hint, 1)
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Duration(hint)*time.Second + rand.N(time.Duration(hint)*time.Second)):
			}
			conn.Close()
			if conn, err = d.DialContext(ctx, "tcp", l.host); err != nil {
				l.failedUnlessDone(ctx, fmt.Errorf("redial: %w", err))
				return
			}
			br = bufio.NewReader(conn)
			continue
		}
		if err != nil || resp.StatusCode != http.StatusOK {
			l.failedUnlessDone(ctx, fmt.Errorf("poll: %d %s %v", resp.StatusCode, clip(body), err))
			return
		}
		var page mbx.PullResponse
		if err := json.Unmarshal(body, &page); err != nil {
			l.failed(fmt.Errorf("poll: %w", err))
			return
		}
		if len(page.Items) > 0 {
			l.mu.Lock()
			for _, it := range page.Items {
				l.recv[it.ItemID] = at
			}
			l.mu.Unlock()
		}
		after = page.LastSeq
		if ra := resp.Header.Get("Retry-After"); ra != "" {
			if !l.cfg.Restart {
				l.failed(fmt.Errorf("poll not held: Retry-After %s", ra))
				return
			}
			// The relay is restarting (or full): pause as a host does, then come back on a new
			// connection once the relay listens again.
			hint, _ := strconv.Atoi(ra)
			select {
			case <-ctx.Done():
				return
			case <-time.After(checkpoint.RetryPause(time.Duration(max(hint, 1))*time.Second, time.Minute)):
			}
			conn.Close()
			for try := 0; ; try++ {
				if conn, err = d.DialContext(ctx, "tcp", l.host); err == nil {
					break
				}
				if try == 60 || ctx.Err() != nil {
					l.failedUnlessDone(ctx, fmt.Errorf("redial after a restart: %w", err))
					return
				}
				time.Sleep(500 * time.Millisecond) // the relay is not listening yet
			}
			br = bufio.NewReader(conn)
		}
	}
}

func (l *loader) failedUnlessDone(ctx context.Context, err error) {
	if ctx.Err() == nil {
		l.failed(err)
	}
}

// hostSource is host i's own loopback source address, 127.10.0.1 onwards (any 127/8 address
// reaches the relay on 127.0.0.1).
func hostSource(i int) net.IP {
	return net.IPv4(127, byte(10+i/(256*254)), byte(i/254%256), byte(i%254+1))
}

// sent is one push of the push phase.
type sent struct {
	id       string
	answered time.Time
	cross    bool
}

// pushPhase pushes one item at a time, at the configured rate, from a random host of this child
// to another, and returns the wake times once every pushed item has arrived (or 30 s after the
// last push).
func (l *loader) pushPhase(ctx context.Context) (loaderReport, error) {
	var rep loaderReport
	n := len(l.keys)
	if n < 2 || l.cfg.Rate <= 0 {
		return rep, nil
	}
	every := time.Duration(float64(time.Second) / l.cfg.Rate)
	end := time.Now().Add(time.Duration(l.cfg.PushSeconds * float64(time.Second)))
	var (
		mu    sync.Mutex
		pushd []sent
		errs  []error
		wg    sync.WaitGroup
	)
	t := time.NewTicker(every)
	defer t.Stop()
	for k := 0; time.Now().Before(end); k++ {
		select {
		case <-ctx.Done():
			return rep, ctx.Err()
		case <-t.C:
		}
		from := rand.IntN(n)
		to := (from + 1 + rand.IntN(n-1)) % n
		id := fmt.Sprintf("bench-%d-%d", l.cfg.Lo, k)
		ri := k % len(l.cfg.PushURLs)
		wg.Go(func() {
			at, err := l.pushOne(ctx, l.cfg.PushURLs[ri], from, to, id)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			pushd = append(pushd, sent{id: id, answered: at, cross: ri > 0})
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return rep, err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		l.mu.Lock()
		missing := 0
		for _, p := range pushd {
			if _, ok := l.recv[p.id]; !ok {
				missing++
			}
		}
		l.mu.Unlock()
		if missing == 0 {
			break
		}
		if time.Now().After(deadline) {
			return rep, fmt.Errorf("%d of %d pushed items never reached their parked poll", missing, len(pushd))
		}
		time.Sleep(10 * time.Millisecond)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, p := range pushd {
		ms := max(float64(l.recv[p.id].Sub(p.answered))/float64(time.Millisecond), 0)
		if p.cross {
			rep.Cross = append(rep.Cross, ms)
		} else {
			rep.Wakes = append(rep.Wakes, ms)
		}
	}
	return rep, nil
}

// pushOne pushes one small item from host from to host to and returns when its answer arrived.
func (l *loader) pushOne(ctx context.Context, base string, from, to int, id string) (time.Time, error) {
	item := mbx.PushItem{Kind: "envelope", ItemID: id,
		Targets: []mbx.PushTarget{{HostPubkey: l.keys[to].PublicKey(), WireB64: mbx.B64(envelopeWire(id, 200))}}}
	body, err := json.Marshal(mbx.PushRequest{Items: []mbx.PushItem{item}})
	if err != nil {
		return time.Time{}, err
	}
	const path = "/v2/relay/items"
	req, err := http.NewRequestWithContext(ctx, "POST", base+path, bytes.NewReader(body))
	if err != nil {
		return time.Time{}, err
	}
	for k, v := range mbx.SignRelayHop(l.keys[from], benchName(l.cfg.Lo+from), "POST", path, body, time.Now(), true) {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := l.push.Do(req)
	if err != nil {
		return time.Time{}, fmt.Errorf("push: %w", err)
	}
	out, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	at := time.Now()
	if err != nil || resp.StatusCode != http.StatusOK || !bytes.Contains(out, []byte(`"status":"accepted"`)) {
		return time.Time{}, fmt.Errorf("push: %d %s %v", resp.StatusCode, clip(out), err)
	}
	return at, nil
}
