package relayserver

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/agentmbx/agentmbx/mbx"
)

// staleEpoch is the 409 of a request that names an epoch that is not current.
func (s *Server) staleEpoch(got string) *apiError {
	return &apiError{err: fmt.Errorf("epoch %q is not current: %w", got, ErrStaleEpoch), epoch: s.epoch}
}

// handlePull is GET /v2/relay/items?after=&limit=&epoch=&wait= (docs/design.md: Receive checkpoint
// and ack). With wait (seconds, cut to Options.MaxWait) a pull that finds nothing is held until an
// item for the caller commits, the wait passes (an empty page, as without wait), the client goes
// away, or the server shuts down (a fresh page at once).
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
	page, pb, retry, err := s.pullWait(r.Context(), caller.HostPubkey, after, int(limit), wait)
	defer putPullBuf(pb)
	if err != nil {
		if r.Context().Err() != nil {
			return // the client went away: nobody to answer
		}
		s.writeError(w, r, fmt.Errorf("pull: %w", err))
		return
	}
	s.met.pulled(len(page.Items))
	if retry > 0 && len(page.Items) == 0 {
		w.Header()["Retry-After"] = []string{strconv.Itoa(int(retry / time.Second))}
	}
	bp := pullBufs.Get().(*[]byte)
	b, ok := appendPullJSON((*bp)[:0], s.epoch, after, page)
	if ok {
		writeRawJSON(w, http.StatusOK, b)
	} else {
		s.writeJSON(w, http.StatusOK, pullResponse(s.epoch, after, page))
	}
	if cap(b) <= 4<<20 { // a huge page's buffer is not kept
		*bp = b[:0]
		pullBufs.Put(bp)
	}
}

// pullBufs are the buffers pull answers are written into.
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

// pullResponse is the answer to a pull that read page after the seq after.
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

// appendPullJSON appends the JSON of pullResponse(epoch, after, page) to buf without reflection,
// byte for byte as writeJSON would write it, the wires base64-encoded straight into buf. ok is
// false when a string needs escaping; the caller then takes the generic encoder.
func appendPullJSON(buf []byte, epoch string, after int64, page Page) ([]byte, bool) {
	if !plainJSON(epoch) {
		return buf, false
	}
	buf = slices.Grow(buf, pullJSONSize(page))
	last := after
	buf = append(append(append(buf, `{"epoch":"`...), epoch...), `","head_seq":`...)
	buf = strconv.AppendInt(buf, page.HeadSeq, 10)
	buf = append(buf, `,"items":[`...)
	var sender string // the last sender checked: a page's items mostly share a few
	for i, it := range page.Items {
		if !plainJSON(string(it.Kind)) || !plainJSON(it.ItemID) || (it.Sender != sender && !plainJSON(it.Sender)) {
			return buf, false
		}
		sender = it.Sender
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = strconv.AppendInt(append(buf, `{"seq":`...), it.Seq, 10)
		buf = append(append(append(buf, `,"kind":"`...), it.Kind...), `","item_id":"`...)
		buf = append(append(append(buf, it.ItemID...), `","sender_pubkey":"`...), it.Sender...)
		buf = appendBase64(append(buf, `","wire_b64":"`...), it.Wire)
		buf = append(buf, `"}`...)
		last = it.Seq
	}
	buf = strconv.AppendInt(append(buf, `],"last_seq":`...), last, 10)
	buf = strconv.AppendBool(append(buf, `,"more":`...), page.More)
	return append(buf, '}'), true
}

// pullJSONSize is about the length of the pull answer of page (exact for the wires).
func pullJSONSize(page Page) int {
	n := 128
	for _, it := range page.Items {
		n += 96 + len(it.Kind) + len(it.ItemID) + len(it.Sender) + base64.StdEncoding.EncodedLen(len(it.Wire))
	}
	return n
}

// plainJSON reports whether s is printable ASCII that no JSON encoder escapes.
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}

// b64Pairs holds the two standard base64 characters of every 12-bit value, the first in the low
// byte.
var b64Pairs = func() *[4096]uint16 {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
	t := new([4096]uint16)
	for v := range t {
		t[v] = uint16(alphabet[v>>6]) | uint16(alphabet[v&63])<<8
	}
	return t
}()

// appendBase64 is base64.StdEncoding.AppendEncode(dst, src), 6 bytes of src (8 characters) a
// step: the pull answer is mostly base64.
func appendBase64(dst, src []byte) []byte {
	n := base64.StdEncoding.EncodedLen(len(src))
	dst = slices.Grow(dst, n)
	out := dst[len(dst) : len(dst)+n]
	j := 0
	for len(src) >= 8 { // reads 8 bytes, encodes 6
		v := binary.BigEndian.Uint64(src) >> 16
		binary.LittleEndian.PutUint64(out[j:], uint64(b64Pairs[v>>36])|uint64(b64Pairs[v>>24&0xfff])<<16|
			uint64(b64Pairs[v>>12&0xfff])<<32|uint64(b64Pairs[v&0xfff])<<48)
		src, j = src[6:], j+8
	}
	base64.StdEncoding.Encode(out[j:], src)
	return dst[:len(dst)+n]
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

// pullWait reads a page of key's queue; when it is empty and wait > 0 it parks until an item for
// key commits and reads again, until the page has items or the wait is over. The pull registers
// before each read, so a commit after the read always wakes it (never a lost wakeup), and a wake
// only ever follows a commit, so the read after it sees the item. The page is read into the
// pooled buffer returned with it (for putPullBuf once the answer is written); a parked pull holds
// none. retry is the hint for an empty page answered without the wait it asked for (the relay
// was full or is shutting down), else 0.
func (s *Server) pullWait(ctx context.Context, key string, after int64, limit int, wait time.Duration) (page Page, buf *PullBuf, retry time.Duration, err error) {
	var timeout <-chan time.Time
	for {
		var w *waiter
		if wait > 0 {
			if w, retry = s.polls.park(key); w == nil && retry == 0 {
				retry = busyRetryAfter
			}
		}
		buf = pullPages.Get().(*PullBuf)
		page, err = pullPage(ctx, s.store, key, after, limit, s.lim.MaxPullBytes, buf)
		if err != nil || len(page.Items) > 0 || w == nil {
			s.polls.leave(w)
			return page, buf, retry, err
		}
		putPullBuf(buf) // an empty page: nothing to keep while parked
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
