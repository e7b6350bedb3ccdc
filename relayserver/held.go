package relayserver

import (
	"bufio"
	"container/heap"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/agentmbx/agentmbx/internal/bodylimit"
	"github.com/agentmbx/agentmbx/internal/logkey"
	"github.com/agentmbx/agentmbx/mbx"
)

// Held long polls (docs/performance.md: Parked long polls). A long poll parked the standard way
// keeps its handler goroutine, the server's background read, the connection's buffers and the
// parsed request: about 43 KiB each. When the relay serves through Server.Listener, an HTTP/1.1
// poll that finds nothing is instead taken over (hijacked) and held as the connection and what its
// answer needs, without a goroutine, buffer or timer of its own:
//   - its wake is the waiter table's, as for every poll (one wake path per key);
//   - its wait ends by one timer for all held polls, set to the earliest deadline;
//   - a client that goes away (or sends anything while held) is noticed by one epoll instance
//     for all held connections (Linux; elsewhere polls park the standard way);
//   - its answer is written by a goroutine started for it, with a write deadline set then, and
//     the connection then goes back to the HTTP server through the listener, to serve the host's
//     next request as a kept-alive connection does.

// heldPoll is one held long poll: its connection and what its answer needs.
type heldPoll struct {
	conn     net.Conn
	w        *waiter
	key      string
	after    int64
	limit    int
	deadline time.Time
	id       string            // the request id
	shares   []bodylimit.Share // of the response budget (its address and key)
	addr     string            // its client address, for the pull slots
	addrs    []rateKey         // its client address buckets, for the cap per address
	close    bool              // close the connection after the answer
	token    uint64            // its registration with the watcher (0: none)
	idx      int               // in the deadline heap; -1 when not there
}

// heldSet is the relay's held polls: by watcher token, and by deadline.
type heldSet struct {
	s     *Server
	ln    *heldListener
	watch connWatch

	mu      sync.Mutex
	byToken map[uint64]*heldPoll
	byTime  heldHeap
	next    uint64
	// timerAt is the deadline the timer is set for (zero: none); kick tells the timer
	// goroutine that an earlier one arrived.
	timerAt time.Time
	kick    chan struct{}
	running bool
	closed  bool
	// inflight counts holds being set up and answers being written: close waits for them.
	inflight sync.WaitGroup
	stop     chan struct{}
	done     chan struct{}
}

// Listener returns ln wrapped so that the relay may hold parked long polls without a goroutine
// each (see heldPoll): a held connection goes back to the HTTP server through it once answered.
// Serve the relay's HTTP server (HTTP/1.1) on the listener it returns, and on no other. Where
// the platform cannot watch held connections it returns ln as it is and polls park the standard
// way.
func (s *Server) Listener(ln net.Listener) net.Listener {
	if s.held != nil {
		panic("relayserver: Listener called twice")
	}
	w, err := newConnWatch()
	if err != nil {
		s.log.Warn("long polls park the standard way: no connection watcher", logkey.Err, err)
		return ln
	}
	hs := &heldSet{s: s, watch: w, byToken: map[uint64]*heldPoll{}, kick: make(chan struct{}, 1),
		stop: make(chan struct{}), done: make(chan struct{})}
	hs.ln = newHeldListener(ln)
	s.held = hs
	go hs.runWatch()
	return hs.ln
}

// HeldPolls is the number of long polls held as connections (part of Parked).
func (s *Server) HeldPolls() int {
	if s.held == nil {
		return 0
	}
	s.held.mu.Lock()
	defer s.held.mu.Unlock()
	return len(s.held.byToken)
}

// begin counts a hold being set up; false once the set is closed.
func (hs *heldSet) begin() bool {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	if hs.closed {
		return false
	}
	hs.inflight.Add(1)
	return true
}

// beginWake counts the answer of a held poll that was woken. It runs under the waiter table's
// lock, so every such answer is counted before the table's close returns, and the set closes
// only after the table (Server.Shutdown).
func (hs *heldSet) beginWake() { hs.inflight.Add(1) }

func (hs *heldSet) end() { hs.inflight.Done() }

// close waits until every answer begun is written (the waiter table, closed first, has woken
// every held poll), then stops the timer and the watcher.
func (hs *heldSet) close() {
	hs.mu.Lock()
	if hs.closed {
		hs.mu.Unlock()
		return
	}
	hs.closed = true
	hs.mu.Unlock()
	hs.inflight.Wait()
	hs.mu.Lock()
	running := hs.running
	hs.mu.Unlock()
	close(hs.stop)
	if running {
		<-hs.done
	}
	hs.watch.close()
}

// What add did with a poll.
const (
	addHeld      = iota // held: a wake, the timer or the watcher answers it
	addWoken            // woken before it was held: the caller answers, for w.why
	addFailed           // not held (its connection cannot be watched): the caller answers now
	addElsewhere        // woken meanwhile, and that wake answers it
)

// add hands h's poll, parked as w, over to the set: w's wakes answer it, the watcher notices its
// client going away and the timer its deadline.
func (hs *heldSet) add(h *heldPoll, w *waiter) int {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	h.w = w
	if !hs.s.polls.hold(w, h) {
		return addWoken
	}
	hs.next++
	h.token = hs.next
	if err := hs.watch.add(h.conn, h.token); err != nil {
		h.token = 0
		hs.s.log.Warn("long poll: cannot watch a held connection", logkey.Err, err)
		if hs.s.polls.take(w) {
			return addFailed
		}
		return addElsewhere
	}
	hs.byToken[h.token] = h
	heap.Push(&hs.byTime, h)
	if hs.timerAt.IsZero() || h.deadline.Before(hs.timerAt) {
		hs.timerAt = h.deadline
		if !hs.running {
			hs.running = true
			go hs.runTimer()
		} else {
			select {
			case hs.kick <- struct{}{}:
			default:
			}
		}
	}
	return addHeld
}

// remove unregisters h from the watcher and the timer, if it is there.
func (hs *heldSet) remove(h *heldPoll) {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	hs.removeLocked(h)
}

func (hs *heldSet) removeLocked(h *heldPoll) {
	if h.token != 0 {
		delete(hs.byToken, h.token)
		hs.watch.del(h.conn)
		h.token = 0
	}
	if h.idx >= 0 {
		heap.Remove(&hs.byTime, h.idx)
	}
}

// gone is the watcher's report that token's client closed its connection or sent something
// while held: its poll ends without an answer.
func (hs *heldSet) gone(token uint64) {
	hs.mu.Lock()
	h := hs.byToken[token]
	if h != nil {
		hs.removeLocked(h)
	}
	hs.mu.Unlock()
	if h != nil && hs.s.polls.take(h.w) {
		_ = h.conn.Close()
	}
}

// runTimer ends held polls whose wait is over: one timer (Options.WaitTimer) for the earliest
// deadline. When it fires, every poll due by the deadline it was set for is answered.
func (hs *heldSet) runTimer() {
	defer close(hs.done)
	for {
		hs.mu.Lock()
		at := hs.timerAt
		hs.mu.Unlock()
		var fire <-chan time.Time
		stop := func() bool { return false }
		if !at.IsZero() {
			fire, stop = hs.s.opt.WaitTimer(max(at.Sub(hs.s.opt.Clock()), 0))
		}
		select {
		case <-hs.stop:
			stop()
			return
		case <-hs.kick:
			stop()
			continue
		case <-fire:
		}
		var due []*heldPoll
		hs.mu.Lock()
		for len(hs.byTime) > 0 && !hs.byTime[0].deadline.After(at) {
			h := heap.Pop(&hs.byTime).(*heldPoll)
			due = append(due, h)
		}
		hs.timerAt = time.Time{}
		if len(hs.byTime) > 0 {
			hs.timerAt = hs.byTime[0].deadline
		}
		hs.mu.Unlock()
		for _, h := range due {
			if hs.s.polls.take(h.w) && hs.begin() {
				go hs.s.answerHeld(h, wakeTimeout)
			}
		}
	}
}

// hold takes over the connection of a poll parked as w (its first read found nothing) and holds
// it. false, with nothing taken, when the connection cannot be taken over (the caller then waits
// the standard way).
func (s *Server) hold(w *waiter, rw http.ResponseWriter, r *http.Request, key string, after int64, limit int, wait time.Duration) bool {
	hs := s.held
	if hs == nil || r.ProtoMajor != 1 || !hs.begin() {
		return false
	}
	conn, brw, err := http.NewResponseController(rw).Hijack()
	if err != nil {
		hs.end()
		return false
	}
	_ = conn.SetDeadline(time.Time{}) // the server's; the answer sets its own write deadline
	h := &heldPoll{conn: conn, key: key, after: after, limit: limit, deadline: s.opt.Clock().Add(wait),
		id: RequestID(r.Context()), shares: s.responseShares(r, key), addr: clientKey(r, s.opt.TrustProxy), addrs: clientKeys(r, s.opt.TrustProxy),
		close: r.Close || r.ProtoMinor == 0, idx: -1}
	if brw.Reader.Buffered() > 0 {
		// The client sent its next request before this answer (pipelining): answer now and close,
		// as the bytes read cannot be handed back to the server.
		h.close = true
		why := wakeEvicted
		if !s.polls.take(w) {
			why = w.why
		}
		go s.answerHeld(h, why)
		return true
	}
	switch hs.add(h, w) {
	case addWoken:
		go s.answerHeld(h, w.why)
	case addFailed:
		go s.answerHeld(h, wakeEvicted)
	default:
		hs.end() // held, or answered by its wake: that is counted on its own
	}
	return true
}

// wakeHeld is the waiter table's onHeld: a held poll was woken (under the table's lock).
func (s *Server) wakeHeld(h *heldPoll, why wakeReason) {
	s.held.beginWake()
	go s.answerHeld(h, why)
}

// answerHeld answers a held poll, as pullWait and handlePull answer a parked one: after a wake by
// an item it reads again (parking again when it finds nothing, as a spurious wake of a shared
// store's re-check does), else it reads once and answers. The connection then goes back to the
// HTTP server. Called between begin and end.
func (s *Server) answerHeld(h *heldPoll, why wakeReason) {
	hs := s.held
	defer hs.end()
	hs.remove(h)
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), ctxKey{}, &reqState{id: h.id}))
	defer cancel()
	hw := &heldWriter{conn: h.conn, bw: bufio.NewWriterSize(h.conn, 4<<10), hdr: http.Header{}, close: h.close}
	hw.hdr[HeaderRequestID] = []string{h.id}
	r := (&http.Request{Method: "GET", URL: &url.URL{Path: "/v2/relay/items"}, Header: http.Header{}, Body: http.NoBody,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}).WithContext(ctx)
	ok, reheld := false, false
	defer func() {
		if v := recover(); v != nil && v != http.ErrAbortHandler { //nolint:errorlint // the sentinel itself
			panic(v)
		}
		if reheld {
			return
		}
		if !ok || hw.finish() != nil || hw.close {
			_ = h.conn.Close()
			return
		}
		hs.ln.giveBack(h.conn)
	}()
	tk := s.respBudget.Ticket(h.shares...)
	defer tk.Release()
	var retry time.Duration
	var page Page
	var pb *PullBuf
	defer func() { putPullBuf(pb) }()
	for {
		var w *waiter
		switch why {
		case wakeItem:
			e, err := s.store.Enrolment(ctx, h.key)
			if err == nil && !e.Live() {
				err = fmt.Errorf("host key %s: %w", mbx.Fingerprint(h.key), ErrRevoked)
			}
			if err == nil {
				err = deniedEnrolment(e)
			}
			if err != nil {
				s.writeError(hw, r, fmt.Errorf("pull: %w", err))
				ok = true
				return
			}
			if s.opt.Clock().Before(h.deadline) {
				if w, retry = s.polls.park(h.key, h.addrs); w == nil && retry == 0 {
					retry = busyRetryAfter
				}
			}
		case wakeShutdown:
			retry = drainRetryAfter
			hw.close = true
		}
		putPullBuf(pb)
		pb = pullPages.Get().(*PullBuf)
		var err error
		page, err = s.readChunk(ctx, h.key, h.after, h.limit, s.lim.MaxPullBytes, pb, tk)
		if err != nil {
			s.polls.leave(w)
			s.writeError(hw, r, fmt.Errorf("pull: %w", err))
			ok = true
			return
		}
		if len(page.Items) > 0 || w == nil {
			s.polls.leave(w)
			break
		}
		// Woken, but nothing new for this key: hold it again until its deadline.
		putPullBuf(pb)
		pb = nil
		tk.Release()
		switch hs.add(h, w) {
		case addWoken:
			why = w.why
			continue
		case addFailed:
			why = wakeEvicted
			continue
		}
		reheld = true // held again, or answered by the wake that came meanwhile
		return
	}
	if len(page.Items) == 0 {
		if retry > 0 {
			hw.hdr["Retry-After"] = []string{strconv.Itoa(int(retry / time.Second))}
		}
		s.met.pulled(0)
		s.writePage(ctx, hw, http.NewResponseController(hw), pullCursor{key: h.key, after: h.after, limit: h.limit}, page, &pb, tk)
		ok = true
		return
	}
	slot, got := s.pulls.acquire(h.key, h.addr, func() {
		cancel()
		_ = h.conn.SetWriteDeadline(time.Unix(1, 0))
	})
	if !got {
		s.writeError(hw, r, fmt.Errorf("%w: too many pulls in flight from this address", ErrBusy))
		ok = true
		return
	}
	defer s.pulls.release(slot)
	n := s.writePage(ctx, hw, http.NewResponseController(hw), pullCursor{key: h.key, after: h.after, limit: h.limit}, page, &pb, tk)
	s.met.pulled(n)
	ok = true
}

// heldWriter is the http.ResponseWriter of a held poll's answer: HTTP/1.1 on the connection,
// chunked when the handler declares no length.
type heldWriter struct {
	conn    net.Conn
	bw      *bufio.Writer
	hdr     http.Header
	wrote   bool
	chunked io.WriteCloser
	close   bool
}

func (w *heldWriter) Header() http.Header { return w.hdr }

func (w *heldWriter) WriteHeader(code int) {
	if w.wrote {
		return
	}
	w.wrote = true
	if w.hdr.Get("Content-Length") == "" {
		w.hdr.Set("Transfer-Encoding", "chunked")
		w.chunked = httputil.NewChunkedWriter(w.bw)
	}
	if w.close {
		w.hdr.Set("Connection", "close")
	}
	w.hdr.Set("Date", time.Now().UTC().Format(http.TimeFormat))
	_, _ = fmt.Fprintf(w.bw, "HTTP/1.1 %03d %s\r\n", code, http.StatusText(code))
	_ = w.hdr.Write(w.bw)
	_, _ = w.bw.WriteString("\r\n")
}

func (w *heldWriter) Write(b []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	if w.chunked != nil {
		return w.chunked.Write(b)
	}
	return w.bw.Write(b)
}

// FlushError sends what is buffered (http.ResponseController.Flush).
func (w *heldWriter) FlushError() error { return w.bw.Flush() }

// SetWriteDeadline is http.ResponseController's.
func (w *heldWriter) SetWriteDeadline(t time.Time) error { return w.conn.SetWriteDeadline(t) }

// finish ends the answer (the last chunk) and sends it.
func (w *heldWriter) finish() error {
	if !w.wrote {
		return errors.New("relayserver: held poll: no answer written")
	}
	if w.chunked != nil {
		if err := w.chunked.Close(); err != nil {
			return err
		}
		if _, err := w.bw.WriteString("\r\n"); err != nil {
			return err
		}
	}
	return w.bw.Flush()
}

// heldHeap orders held polls by deadline.
type heldHeap []*heldPoll

func (q heldHeap) Len() int           { return len(q) }
func (q heldHeap) Less(i, j int) bool { return q[i].deadline.Before(q[j].deadline) }
func (q heldHeap) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].idx, q[j].idx = i, j
}
func (q *heldHeap) Push(x any) {
	h := x.(*heldPoll)
	h.idx = len(*q)
	*q = append(*q, h)
}
func (q *heldHeap) Pop() any {
	old := *q
	h := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	h.idx = -1
	return h
}

// heldListener is the relay's listener with a way back in for held connections once answered.
type heldListener struct {
	net.Listener
	accepted chan acceptResult
	back     chan net.Conn
	done     chan struct{}
	once     sync.Once
}

type acceptResult struct {
	c   net.Conn
	err error
}

func newHeldListener(ln net.Listener) *heldListener {
	l := &heldListener{Listener: ln, accepted: make(chan acceptResult), back: make(chan net.Conn), done: make(chan struct{})}
	go func() {
		for {
			c, err := ln.Accept()
			select {
			case l.accepted <- acceptResult{c, err}:
			case <-l.done:
				if c != nil {
					_ = c.Close()
				}
				return
			}
			if err != nil && errors.Is(err, net.ErrClosed) {
				return
			}
		}
	}()
	return l
}

// Accept returns the next new connection, or a held one given back.
func (l *heldListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.back:
		return c, nil
	case a := <-l.accepted:
		return a.c, a.err
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// giveBack hands an answered held connection back to the HTTP server, or closes it once the
// listener is closed.
func (l *heldListener) giveBack(c net.Conn) {
	select {
	case l.back <- c:
	case <-l.done:
		_ = c.Close()
	}
}

func (l *heldListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return l.Listener.Close()
}
