package relayserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/agentmbx/agentmbx/internal/bodylimit"
	"github.com/agentmbx/agentmbx/internal/logkey"
	"github.com/agentmbx/agentmbx/mbx"
)

// staleEpoch is the 409 of a request that names an epoch that is not current.
func (s *Server) staleEpoch(got string) *apiError {
	return &apiError{err: fmt.Errorf("epoch %q is not current: %w", got, ErrStaleEpoch), epoch: s.epoch}
}

// handlePull is GET /v2/relay/items?after=&limit=&epoch=&wait= (docs/design.md: Receive checkpoint
// and ack). With wait (seconds, cut to Options.MaxWait) a pull that finds nothing is held until an
// item for the caller commits, the wait passes (an empty page, as without wait), the client goes
// away, or the server shuts down (a fresh page at once). The answer is read from the store and
// written a chunk at a time (writePage), within the relay's budget of response bytes.
func (s *Server) handlePull(w http.ResponseWriter, r *http.Request) {
	caller, err := s.authenticate(r, nil)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	q := r.URL.Query()
	if e := q.Get("epoch"); e != "" && e != s.epoch {
		s.writeError(w, r, s.staleEpoch(e))
		return
	}
	after, err := queryInt(q.Get("after"), 0)
	if err != nil || after < 0 {
		s.writeError(w, r, fmt.Errorf("%w: after must be a non-negative integer", ErrBadRequest))
		return
	}
	limit, err := queryInt(q.Get("limit"), int64(s.lim.MaxPull))
	if err != nil || limit < 1 {
		s.writeError(w, r, fmt.Errorf("%w: limit must be a positive integer", ErrBadRequest))
		return
	}
	limit = min(limit, int64(s.lim.MaxPull))
	wait, err := parseWait(q.Get("wait"), s.opt.MaxWait)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	// ctx ends when the client goes away or a newer pull of the key ends this one (pullSlots).
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	tk := s.respBudget.Ticket(s.responseShares(r, caller.HostPubkey)...)
	defer tk.Release()
	var hold func(*waiter) bool
	if s.held != nil && r.ProtoMajor == 1 {
		hold = func(pw *waiter) bool { return s.hold(pw, w, r, caller.HostPubkey, after, int(limit), wait) }
	}
	addrs := clientKeys(r, s.opt.TrustProxy)
	page, pb, retry, err := s.pullWait(ctx, caller.HostPubkey, addrs, after, int(limit), wait, tk, hold)
	defer func() { putPullBuf(pb) }()
	if errors.Is(err, errHeld) {
		return // the connection was taken over: held.go answers it
	}
	if err != nil {
		if ctx.Err() != nil {
			return // the client went away: nobody to answer
		}
		s.writeError(w, r, fmt.Errorf("pull: %w", err))
		return
	}
	rc := http.NewResponseController(w)
	if len(page.Items) == 0 {
		if retry > 0 {
			w.Header()["Retry-After"] = []string{strconv.Itoa(int(retry / time.Second))}
		}
		s.met.pulled(0)
		s.writePage(ctx, w, rc, pullCursor{key: caller.HostPubkey, after: after, limit: int(limit)}, page, &pb, tk)
		return
	}
	slot, ok := s.pulls.acquire(caller.HostPubkey, clientKey(r, s.opt.TrustProxy), func() {
		cancel()
		_ = rc.SetWriteDeadline(time.Unix(1, 0)) // a write blocked on a slow reader fails now
	})
	if !ok {
		s.writeError(w, r, fmt.Errorf("%w: too many pulls in flight from this address", ErrBusy))
		return
	}
	defer s.pulls.release(slot)
	n := s.writePage(ctx, w, rc, pullCursor{key: caller.HostPubkey, after: after, limit: int(limit)}, page, &pb, tk)
	s.met.pulled(n)
}

// pullCursor is what a pull asked for: key's items after after, at most limit of them.
type pullCursor struct {
	key   string
	after int64
	limit int
}

// writePage writes the answer whose first chunk first was read (into *pb, within tk) and returns
// the number of items written. A page that the first chunk completes is written with its length
// declared. A longer one is streamed: each further chunk is read after the last item written,
// within the response budget, and written before the next is read; items past the head_seq
// announced at the start (queued since) are left for the next pull, as is the rest of the page
// when the budget is spent (more is then true). A write deadline is set before each chunk, from
// its size (Options.PullWriteGrace and PullMinRate), so a slow reader holds at most a chunk, for a
// bounded time. When the page cannot be finished (the store failed, or a newer pull of the key
// ended this one) the connection is aborted, so the client sees a transport error, never a short
// page.
func (s *Server) writePage(ctx context.Context, w http.ResponseWriter, rc *http.ResponseController, c pullCursor,
	first Page, pb **PullBuf, tk *bodylimit.Ticket) int {
	sb := scratchBufs.Get().(*[]byte)
	defer scratchBufs.Put(sb)
	enc := pageEncoder{w: w, buf: (*sb)[:0]}
	defer func() { *sb = enc.buf[:0] }()
	head, page := first.HeadSeq, first
	var sent int64
	for _, it := range page.Items {
		sent += int64(len(it.Wire))
	}
	h := w.Header()
	h["Content-Type"] = jsonContentType[:1:1]
	if !page.More || len(page.Items) >= c.limit || sent >= s.lim.MaxPullBytes {
		// The whole page is in hand: its length is known.
		last := c.after
		if len(page.Items) > 0 {
			last = page.Items[len(page.Items)-1].Seq
		}
		size := pageJSONLen(s.epoch, head, last, page.Items, page.More)
		h.Set("Content-Length", strconv.FormatInt(size, 10))
		s.writeDeadline(rc, size)
		w.WriteHeader(http.StatusOK)
		enc.start(s.epoch, head)
		for i := range page.Items {
			enc.item(&page.Items[i], i == 0)
		}
		enc.end(last, page.More)
		return len(page.Items)
	}
	w.WriteHeader(http.StatusOK)
	enc.start(s.epoch, head)
	n, last, more := 0, c.after, true
	for {
		s.writeDeadline(rc, pageJSONLen("", 0, 0, page.Items, false))
		for i := range page.Items {
			enc.item(&page.Items[i], n == 0)
			n++
			last = page.Items[i].Seq
		}
		enc.flush()
		if enc.err != nil {
			panic(http.ErrAbortHandler) // the client is gone or too slow: nobody reads the rest
		}
		putPullBuf(*pb)
		*pb = nil
		tk.Release()
		if !page.More {
			more = false
			break
		}
		if n >= c.limit || sent >= s.lim.MaxPullBytes {
			break
		}
		*pb = pullPages.Get().(*PullBuf)
		var err error
		page, err = s.readChunk(ctx, c.key, last, c.limit-n, s.lim.MaxPullBytes-sent, *pb, tk)
		if errors.Is(err, errChunkBusy) {
			break // the budget is spent: the page ends here, more says come back
		}
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("pull: reading the page failed mid-answer", logkey.Req, RequestID(ctx), logkey.Err, err)
			}
			panic(http.ErrAbortHandler)
		}
		// Items queued after the answer began are past its head_seq; an item that would take the
		// page over its byte cap waits for the next pull.
		keep := 0
		for keep < len(page.Items) && page.Items[keep].Seq <= head &&
			sent+int64(len(page.Items[keep].Wire)) <= s.lim.MaxPullBytes {
			sent += int64(len(page.Items[keep].Wire))
			keep++
		}
		if keep < len(page.Items) {
			page.Items, page.More = page.Items[:keep], true
		}
		if keep == 0 {
			break
		}
	}
	enc.end(last, more)
	if enc.err != nil {
		panic(http.ErrAbortHandler)
	}
	return n
}

// writeDeadline sets the deadline of the next write of size bytes: PullWriteGrace, plus the time
// the bytes take at PullMinRate.
func (s *Server) writeDeadline(rc *http.ResponseController, size int64) {
	d := s.opt.PullWriteGrace + time.Duration(float64(size)/float64(s.opt.PullMinRate)*float64(time.Second))
	_ = rc.SetWriteDeadline(time.Now().Add(d)) // a writer without deadlines keeps the server's
}

// errHeld is pullWait's answer when its pull was taken over to be held (held.go).
var errHeld = errors.New("relayserver: pull held")

// errChunkBusy is readChunk's answer when the response budget cannot hold a chunk.
var errChunkBusy = fmt.Errorf("%w: the relay's budget of response bytes is spent", ErrBusy)

// readChunk reads the next chunk of a pull answer into buf: at most limit items after after and,
// past the first item, at most maxBytes of wire bytes, and never more than the chunk the
// response budget held for it (tk, which holds nothing before). When the budget cannot hold a
// full chunk, a small one is tried (the budget keeps a reserve for those, so hosts with little
// mail are served while large answers wait); errChunkBusy when even that does not fit.
func (s *Server) readChunk(ctx context.Context, key string, after int64, limit int, maxBytes int64, buf *PullBuf, tk *bodylimit.Ticket) (Page, error) {
	take := min(s.pullChunk, maxBytes)
	if !tk.Take(take) {
		take = min(bodylimit.SmallBody, maxBytes)
		if !tk.Take(take) {
			return Page{}, errChunkBusy
		}
	}
	page, err := pullPage(ctx, s.store, key, after, limit, take, buf)
	if err != nil {
		tk.Release()
		return Page{}, err
	}
	var wire int64
	for _, it := range page.Items {
		wire += int64(len(it.Wire))
	}
	if wire > take && !tk.Take(wire-take) { // one item larger than the chunk
		tk.Release()
		return Page{}, errChunkBusy
	}
	return page, nil
}

// pullBufs are the buffers push answers are written into.
var pullBufs = sync.Pool{New: func() any { return new([]byte) }}

// pullPages are the buffers pull pages are read into.
var pullPages = sync.Pool{New: func() any { return new(PullBuf) }}

// putPullBuf returns b to pullPages, unless it is nil or a huge page grew it.
func putPullBuf(b *PullBuf) {
	if b != nil && cap(b.Wires) <= 4<<20 && cap(b.Items) <= 4096 {
		b.Reset()
		pullPages.Put(b)
	}
}

// pullResponse is the answer to a pull that read page after the seq after, as the generic encoder
// takes it.
func pullResponse(epoch string, after int64, page Page) mbx.PullResponse {
	resp := mbx.PullResponse{Epoch: epoch, HeadSeq: page.HeadSeq, Items: make([]mbx.PullItem, len(page.Items)),
		LastSeq: after, More: page.More}
	for i, it := range page.Items {
		resp.Items[i] = mbx.PullItem{Seq: it.Seq, Kind: string(it.Kind), ItemID: it.ItemID,
			SenderPubkey: it.Sender, WireB64: mbx.B64(it.Wire)}
		resp.LastSeq = it.Seq
	}
	return resp
}

// Retry hints of long polls the relay did not hold (docs/relay.md: Long polls). A pull that asked
// to wait and got an empty page at once carries Retry-After: the host comes back after that long,
// jittered (inbox.Receiver), so that thousands of hosts turned away together do not return
// together.
const (
	// busyRetryAfter is the hint of a pull that could not park: the table of parked pulls was
	// full.
	busyRetryAfter = 10 * time.Second
	// drainRetryAfter is the hint of a pull answered because the relay is shutting down.
	drainRetryAfter = 5 * time.Second
)

// pullWait reads the first chunk of a page of key's queue (readChunk, within tk); when it is empty and wait > 0 it parks until an item for
// key commits and reads again, until the page has items or the wait is over. The pull registers
// before each read, so a commit after the read always wakes it (never a lost wakeup), and a wake
// only ever follows a commit, so the read after it sees the item. The page is read into the
// pooled buffer returned with it (for putPullBuf once the answer is written); a parked pull holds
// none. retry is the hint for an empty page answered without the wait it asked for (the relay
// was full or is shutting down), else 0.
//
// hold, when set, may take the parked pull over instead (held.go): pullWait then returns errHeld.
func (s *Server) pullWait(ctx context.Context, key string, addrs []rateKey, after int64, limit int, wait time.Duration, tk *bodylimit.Ticket,
	hold func(*waiter) bool) (page Page, buf *PullBuf, retry time.Duration, err error) {
	var timeout <-chan time.Time
	for {
		var w *waiter
		if wait > 0 {
			if w, retry = s.polls.park(key, addrs); w == nil && retry == 0 {
				retry = busyRetryAfter
			}
		}
		buf = pullPages.Get().(*PullBuf)
		page, err = s.readChunk(ctx, key, after, limit, s.lim.MaxPullBytes, buf, tk)
		if err != nil || len(page.Items) > 0 || w == nil {
			s.polls.leave(w)
			if len(page.Items) == 0 {
				tk.Release() // an empty answer holds nothing
			}
			return page, buf, retry, err
		}
		putPullBuf(buf) // an empty page: nothing to keep while parked
		tk.Release()
		if timeout == nil && hold != nil && hold(w) {
			return Page{}, nil, 0, errHeld
		}
		if timeout == nil {
			c, stop := s.opt.WaitTimer(wait)
			defer stop()
			timeout = c
		}
		s.met.parked()
		select {
		case <-w.ch:
		case <-timeout:
			s.polls.leave(w)
			return page, nil, 0, nil // empty: nothing of it is in the buffer given back
		case <-ctx.Done():
			s.polls.leave(w)
			return page, nil, 0, ctx.Err()
		}
		switch w.why {
		case wakeItem:
			// The commit may have been a rotation that revoked this very key, or the deny list
			// may have revoked it: answer as a new request would.
			e, err := s.store.Enrolment(ctx, key)
			if err != nil {
				return Page{}, nil, 0, err
			}
			if !e.Live() {
				return Page{}, nil, 0, fmt.Errorf("host key %s: %w", mbx.Fingerprint(key), ErrRevoked)
			}
			if err := deniedEnrolment(e); err != nil {
				return Page{}, nil, 0, err // the deny list revoked it meanwhile
			}
			if err := s.expiredProof(e); err != nil {
				return Page{}, nil, 0, err
			}
		case wakeShutdown:
			wait, retry = 0, drainRetryAfter // read once more and answer
		default: // evicted by a newer pull of the key: read once more and answer
			wait = 0
		}
	}
}

func queryInt(s string, def int64) (int64, error) {
	if s == "" {
		return def, nil
	}
	return strconv.ParseInt(s, 10, 64)
}

// withHead adds the caller's head_seq to an error answer (when it can be read).
func (s *Server) withHead(ctx context.Context, ae *apiError, key string) *apiError {
	if h, err := s.store.Head(ctx, key); err == nil {
		ae.headSeq = &h.HeadSeq
	}
	return ae
}

// handleAck is POST /v2/relay/ack {epoch, through} (docs/design.md: Receive checkpoint and ack).
func (s *Server) handleAck(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Epoch   *string      `json:"epoch"`
		Through *json.Number `json:"through"`
	}
	caller, ok := s.signedJSON(w, r, s.opt.MaxSmallBody, &req)
	if !ok {
		return
	}
	if req.Through == nil {
		s.writeError(w, r, fmt.Errorf("%w: through is required", ErrBadRequest))
		return
	}
	through, err := req.Through.Int64()
	if err != nil || through < 0 {
		s.writeError(w, r, fmt.Errorf("%w: through must be a non-negative integer", ErrBadRequest))
		return
	}
	if req.Epoch != nil && *req.Epoch != s.epoch {
		// As 0.5.x: the 409 of a stale ack also says where the caller's queue is now.
		s.writeError(w, r, s.withHead(r.Context(), s.staleEpoch(*req.Epoch), caller.HostPubkey))
		return
	}
	var res AckResult
	err = s.store.Update(r.Context(), func(tx Tx) error {
		var err error
		res, err = tx.Ack(caller.HostPubkey, through)
		return err
	})
	if errors.Is(err, ErrBadAck) {
		s.writeError(w, r, s.withHead(r.Context(), &apiError{err: err, epoch: s.epoch}, caller.HostPubkey))
		return
	}
	if err != nil {
		s.writeError(w, r, fmt.Errorf("ack: %w", err))
		return
	}
	s.cap.free()
	s.met.acked(res.Deleted)
	s.writeJSON(w, http.StatusOK, mbx.AckResponse{AckedThrough: res.AckedThrough, Deleted: res.Deleted, HeadSeq: res.HeadSeq})
}

// infoResponse is mbx.InfoResponse with the limits of this relay beyond 0.5.x's: clients that
// do not know a field ignore it.
type infoResponse struct {
	V           int             `json:"v"`
	RelayPubkey string          `json:"relay_pubkey"`
	Epoch       string          `json:"epoch"`
	Version     string          `json:"version"`
	Limits      infoLimits      `json:"limits"`
	You         *mbx.InfoCaller `json:"you,omitempty"`
}

// infoLimits adds to the 0.5.x limits max_wait: the longest long-poll wait of a pull, in
// seconds (absent when the relay does not hold pulls).
type infoLimits struct {
	mbx.Limits
	MaxWait int64 `json:"max_wait,omitempty"`
}

// infoEncAd is the 0.5.x summary of a stored ad for the you block of /v2/relay/info
// (docs/protocol.md): {enc_pub, exp} of the v2 ad (null, null without one) and v1, the enc key
// of the v1 ad (null without one). nil (served as null) when neither is held.
func infoEncAd(ad EncAd) *mbx.InfoEncAd {
	out := &mbx.InfoEncAd{}
	if len(ad.Ad) > 0 {
		var v2 struct {
			EncPub string `json:"enc_pub"`
			Exp    string `json:"exp"`
		}
		if json.Unmarshal(ad.Ad, &v2) == nil && v2.EncPub != "" {
			out.EncPub = &v2.EncPub
			if v2.Exp != "" {
				out.Exp = &v2.Exp
			}
		}
	}
	if ad.V1Sig != "" && ad.EncPub != "" {
		v1 := ad.EncPub
		out.V1 = &v1
	}
	if out.EncPub == nil && out.V1 == nil {
		return nil
	}
	return out
}

// handleInfo is GET /v2/relay/info (docs/design.md: Relay identity and pinning): the relay's key,
// epoch and limits, and with a valid hop the caller's own position.
func (s *Server) handleInfo(w http.ResponseWriter, r *http.Request) {
	resp := infoResponse{V: 2, RelayPubkey: s.key.PublicKey(), Epoch: s.epoch, Version: s.opt.Version,
		Limits: infoLimits{Limits: s.lim, MaxWait: int64(max(s.opt.MaxWait, 0) / time.Second)}}
	if r.Header.Get(mbx.HeaderSig) != "" {
		if e, err := s.authenticate(r, nil); err == nil {
			h, err := s.store.Head(r.Context(), e.HostPubkey)
			if err != nil {
				s.writeError(w, r, fmt.Errorf("info: %w", err))
				return
			}
			you := &mbx.InfoCaller{Host: e.HostName, Pubkey: e.HostPubkey, HeadSeq: h.HeadSeq, AckedThrough: h.AckedThrough, Account: e.Account}
			ad, err := s.store.EncAd(r.Context(), e.HostPubkey)
			switch {
			case err == nil:
				you.EncAd = infoEncAd(ad)
			case !errors.Is(err, ErrNotFound):
				s.writeError(w, r, fmt.Errorf("info: %w", err))
				return
			}
			resp.You = you
		}
	}
	s.writeJSON(w, http.StatusOK, resp)
}
