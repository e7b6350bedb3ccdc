package relayserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/agentmbx/agentmbx/internal/logkey"
	"github.com/agentmbx/agentmbx/mbx"
)

// The v1 message endpoints (docs/design.md: Compatibility): kept so 0.5.x clients that speak only v1 keep working,
// with 0.5.x's v1 semantics over the same store, quotas, allowlists and pull bounds as v2.
//
//	POST /v1/relay/messages {envelopes:[sealed envelope, …]} → 200 {stored, error?}
//	GET  /v1/relay/messages?after=N → 200 {items:[{seq, envelope, from}], cursor}
//	POST /v1/relay/ack {cursor} → 200 {ok:true}
//
// A v1 push routes each envelope by the host names of its `to` addresses. A name resolves only
// when exactly one live enrolment carries it (or exactly one inside the sender's proven
// account); a crowded name (over mbx.MaxEnrolmentsPerName live enrolments) is ambiguous too, and
// an ambiguous or unknown name stores nothing. Envelopes are stored in order, each atomically
// over all its targets, until the first refusal: the answer says how many were stored and why
// the next was not (413 when none was, as 0.5.x answers). Dedup is by (sender, envelope id,
// target) alone, since v1 senders seal again on every retry: a repeat counts as stored. There is
// no accept statement: v1 clients take the 200 as the relay's word.
//
// A v1 pull returns the caller's envelopes after `after` (other item kinds are skipped and pass
// with the cursor), bounded by max_pull and max_pull_bytes; cursor is the last seq returned
// when the page is cut, else the caller's head. An ack drops everything through cursor (cut to
// the head).

// V1 answers.
type (
	v1PushRequest struct {
		Envelopes []json.RawMessage `json:"envelopes"`
	}
	v1PushResponse struct {
		Stored int    `json:"stored"`
		Error  string `json:"error,omitempty"`
	}
	v1Item struct {
		Seq      int64           `json:"seq"`
		Envelope json.RawMessage `json:"envelope"`
		From     string          `json:"from"`
	}
	v1PullResponse struct {
		Items  []v1Item `json:"items"`
		Cursor int64    `json:"cursor"`
	}
)

func (s *Server) routesV1(m *http.ServeMux) {
	m.HandleFunc("POST /v1/relay/messages", s.handleV1Push)
	m.HandleFunc("GET /v1/relay/messages", s.handleV1Pull)
	m.HandleFunc("POST /v1/relay/ack", s.handleV1Ack)
}

// resolveName is the v1 lookup of a host name: the one live enrolment that carries it, or the
// one inside viewer's proven account. ambiguous reports several (or a crowded name).
func (s *Server) resolveName(ctx context.Context, name string, viewer Enrolment) (e Enrolment, found, ambiguous bool, err error) {
	if name == "" {
		return Enrolment{}, false, false, nil
	}
	es, err := s.store.EnrolmentsByName(ctx, name, mbx.MaxEnrolmentsPerName+1)
	if err != nil {
		return Enrolment{}, false, false, err
	}
	switch {
	case len(es) > mbx.MaxEnrolmentsPerName:
		return Enrolment{}, false, true, nil
	case len(es) == 1:
		return es[0], true, false, nil
	}
	var mine []Enrolment
	for _, c := range es {
		if viewer.Account != "" && c.Account == viewer.Account {
			mine = append(mine, c)
		}
	}
	if len(mine) == 1 {
		return mine[0], true, false, nil
	}
	return Enrolment{}, false, len(es) > 1, nil
}

// handleV1Push is POST /v1/relay/messages.
func (s *Server) handleV1Push(w http.ResponseWriter, r *http.Request) {
	// Envelopes are counted as the body arrives: a batch over max_batch is refused before the
	// rest is read, with 0.5.x's answer to it.
	caller, body, err := s.readSigned(w, r, s.opt.MaxBody, &batchCounter{batchName: "envelopes",
		maxBatch: s.lim.MaxBatch, maxTargets: math.MaxInt, over: func(scanRole, int, int) error { return errV1Batch }})
	if errors.Is(err, errV1Batch) {
		if unread(r) {
			w.Header().Set("Connection", "close")
		}
		s.writeJSON(w, http.StatusRequestEntityTooLarge, v1PushResponse{Error: s.v1BatchOver()})
		return
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	var req v1PushRequest
	if err := decodeJSON(body, &req); err != nil || req.Envelopes == nil {
		s.writeError(w, r, fmt.Errorf("%w: bad batch: want {envelopes:[…]}", ErrBadRequest))
		return
	}
	res := s.v1Push(r.Context(), caller, req.Envelopes)
	s.met.v1Pushed(res.Stored, res.Error != "")
	status := http.StatusOK
	if res.Error != "" && res.Stored == 0 {
		status = http.StatusRequestEntityTooLarge // 0.5.x's answer to a push that stored nothing
	}
	s.writeJSON(w, status, res)
}

// errV1Batch is the refusal of a v1 batch over max_batch while it arrives.
var errV1Batch = errors.New("v1 batch over max_batch")

// v1BatchOver is the error of a v1 answer to a batch over max_batch.
func (s *Server) v1BatchOver() string { return fmt.Sprintf("batch over limit %d", s.lim.MaxBatch) }

// v1Push stores envelopes in order until the first refusal.
func (s *Server) v1Push(ctx context.Context, caller Enrolment, envs []json.RawMessage) v1PushResponse {
	var res v1PushResponse
	if len(envs) > s.lim.MaxBatch {
		res.Error = s.v1BatchOver()
		return res
	}
	now := s.opt.Clock()
	if !s.pushR.allow(caller.HostPubkey, now) {
		res.Error = "push rate exceeded"
		return res
	}
	// Once a unit is queued its outcome is waited for, as for a v2 push.
	ctx = context.WithoutCancel(ctx)
	for _, raw := range envs {
		if err := s.v1Store(ctx, caller, raw, now); err != nil {
			var rj *v1Refusal
			if errors.As(err, &rj) {
				res.Error = rj.why
			} else {
				s.log.Error("v1 push", logkey.Err, err)
				res.Error = "relay could not store the envelope; retry later"
			}
			return res
		}
		res.Stored++
	}
	return res
}

// v1Refusal is why a v1 envelope was not stored, in 0.5.x's words.
type v1Refusal struct{ why string }

func (r *v1Refusal) Error() string { return r.why }

func refuse(format string, a ...any) error { return &v1Refusal{fmt.Sprintf(format, a...)} }

// v1Envelope is what the relay reads of a v1 envelope: its id, its recipients and whether its
// body is sealed.
type v1Envelope struct {
	ID  string          `json:"id"`
	To  []string        `json:"to"`
	Enc json.RawMessage `json:"enc"`
}

// v1Store stores one envelope for every host it is addressed to, in one unit.
func (s *Server) v1Store(ctx context.Context, caller Enrolment, raw json.RawMessage, now time.Time) (err error) {
	wire, e, err := v1Wire(raw)
	if err != nil {
		return err
	}
	if int64(len(wire)) > s.lim.MaxItemBytes {
		return refuse("envelope over size limit")
	}
	targets, err := s.v1Targets(ctx, caller, e.To)
	if err != nil {
		return err
	}
	hash := mbx.WireHash(wire)
	// The relay-wide capacity, as for a v2 push (capacity.go).
	want := Counts{Items: int64(len(targets)), Bytes: int64(len(targets)) * int64(len(wire))}
	noRoom := s.spaceLow() || !s.cap.take(ctx, want.Items, want.Bytes, now)
	if noRoom {
		want = Counts{}
	}
	var woke []string
	defer func() {
		stored := int64(len(woke))
		if err != nil {
			stored = 0
		}
		if left := want.Items - stored; left > 0 {
			s.cap.give(left, left*int64(len(wire)))
		}
	}()
	err = s.store.Update(ctx, func(tx Tx) error {
		woke = woke[:0]
		for _, t := range targets {
			a, err := tx.Admission(caller.HostPubkey, e.ID, t.HostPubkey)
			if err != nil {
				return err
			}
			if a.Duplicate {
				continue // v1 dedup is by id: the envelope was stored for this host before
			}
			if !a.Allowed {
				return refuse("sender not accepted by %s", t.HostName)
			}
			if noRoom {
				return refuse("%s for %s", RejectRelayQuota, t.HostName)
			}
			if code := s.quotaCode(a, int64(len(wire))); code != "" {
				return refuse("%s for %s", code, t.HostName)
			}
			if _, err := tx.InsertItem(Item{Target: t.HostPubkey, Kind: KindEnvelope, ItemID: e.ID, Sender: caller.HostPubkey,
				Wire: wire, WireHash: hash, AcceptedAt: now, ExpiresAt: now.Add(s.lim.Retention())}); err != nil {
				return err
			}
			woke = append(woke, t.HostPubkey)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, t := range woke {
		s.polls.wake(t)
	}
	return nil
}

// v1Wire checks a v1 envelope as the relay can (an object with an id and a sealed body) and
// returns the bytes it stores: the envelope as sent, without insignificant whitespace.
func v1Wire(raw json.RawMessage) ([]byte, v1Envelope, error) {
	var e v1Envelope
	if err := json.Unmarshal(raw, &e); err != nil || len(raw) == 0 || raw[0] != '{' {
		return nil, e, refuse("bad envelope: not an envelope object")
	}
	if e.ID == "" || utf16Len(e.ID) > mbx.MaxItemIDLen {
		return nil, e, refuse("bad envelope: id")
	}
	if len(e.To) == 0 {
		return nil, e, refuse("bad envelope: to")
	}
	if len(e.Enc) == 0 || e.Enc[0] != '{' {
		return nil, e, refuse(RejectNotSealed) // never a plaintext body on the relay
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return nil, e, refuse("bad envelope: %v", err)
	}
	return buf.Bytes(), e, nil
}

// v1Targets resolves the distinct host names of an envelope's addresses.
func (s *Server) v1Targets(ctx context.Context, caller Enrolment, to []string) ([]Enrolment, error) {
	var out []Enrolment
	seen := map[string]bool{}
	for _, addr := range to {
		_, host, _ := strings.Cut(addr, "@")
		if seen[strings.ToLower(host)] {
			continue
		}
		seen[strings.ToLower(host)] = true
		t, found, ambiguous, err := s.resolveName(ctx, host, caller)
		switch {
		case err != nil:
			return nil, err
		case ambiguous:
			return nil, refuse("recipient host ambiguous: %s (several hosts use that name here; address hosts by key with v2)", host)
		case !found:
			return nil, refuse("recipient host not enrolled: %s", host)
		}
		if slices.ContainsFunc(out, func(o Enrolment) bool { return o.HostPubkey == t.HostPubkey }) {
			continue
		}
		if len(out) == s.lim.MaxTargets {
			return nil, refuse("too many recipient hosts (max %d)", s.lim.MaxTargets)
		}
		out = append(out, t)
	}
	return out, nil
}

// handleV1Pull is GET /v1/relay/messages?after=N.
func (s *Server) handleV1Pull(w http.ResponseWriter, r *http.Request) {
	caller, err := s.authenticate(r, nil)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	after, err := queryInt(r.URL.Query().Get("after"), 0)
	if err != nil || after < 0 {
		s.writeError(w, r, fmt.Errorf("%w: after must be a non-negative integer", ErrBadRequest))
		return
	}
	// A v1 page is at most one chunk of the response budget (its cursor lets the client come
	// back for the rest), bounded like a v2 answer: per key, per address, and by a write
	// deadline from its size.
	tk := s.respBudget.Ticket(s.responseShares(r, caller.HostPubkey)...)
	defer tk.Release()
	pb := pullPages.Get().(*PullBuf)
	defer putPullBuf(pb)
	p, err := s.readChunk(r.Context(), caller.HostPubkey, after, s.lim.MaxPull, s.lim.MaxPullBytes, pb, tk)
	if err != nil {
		s.writeError(w, r, fmt.Errorf("v1 pull: %w", err))
		return
	}
	if len(p.Items) > 0 {
		rc := http.NewResponseController(w)
		slot, ok := s.pulls.acquire(caller.HostPubkey, clientKey(r, s.opt.TrustProxy), func() {
			_ = rc.SetWriteDeadline(time.Unix(1, 0))
		})
		if !ok {
			s.writeError(w, r, fmt.Errorf("%w: too many pulls in flight from this address", ErrBusy))
			return
		}
		defer s.pulls.release(slot)
		var wire int64
		for _, it := range p.Items {
			wire += int64(len(it.Wire))
		}
		if !tk.Take(wire) { // the answer is encoded whole: its bytes count too
			s.writeError(w, r, errChunkBusy)
			return
		}
		s.writeDeadline(rc, wire*4/3)
	}
	resp := v1PullResponse{Items: []v1Item{}, Cursor: p.HeadSeq}
	if p.More && len(p.Items) > 0 {
		resp.Cursor = p.Items[len(p.Items)-1].Seq
	}
	names := map[string]string{}
	for _, it := range p.Items {
		if it.Kind != KindEnvelope {
			continue // receipts and expiry notices are v2 items; the cursor passes them
		}
		from, ok := names[it.Sender]
		if !ok {
			if e, err := s.store.Enrolment(r.Context(), it.Sender); err == nil {
				from = e.HostName
			}
			names[it.Sender] = from
		}
		resp.Items = append(resp.Items, v1Item{Seq: it.Seq, Envelope: it.Wire, From: from})
	}
	s.met.pulled(len(resp.Items))
	s.writeJSON(w, http.StatusOK, resp)
}

// handleV1Ack is POST /v1/relay/ack {cursor}: everything through cursor (cut to the head) is done.
func (s *Server) handleV1Ack(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Cursor json.Number `json:"cursor"`
	}
	caller, ok := s.signedJSON(w, r, s.opt.MaxSmallBody, &req)
	if !ok {
		return
	}
	cursor, err := req.Cursor.Float64()
	if req.Cursor == "" {
		cursor, err = 0, nil
	}
	if err != nil || math.IsNaN(cursor) {
		s.writeError(w, r, fmt.Errorf("%w: cursor must be a number", ErrBadRequest))
		return
	}
	var deleted int64
	err = s.store.Update(r.Context(), func(tx Tx) error {
		h, err := tx.Head(caller.HostPubkey)
		if err != nil {
			return err
		}
		through := min(max(0, int64(math.Floor(min(cursor, math.MaxInt64/2)))), h.HeadSeq)
		res, err := tx.Ack(caller.HostPubkey, through)
		deleted = res.Deleted
		return err
	})
	if err != nil {
		s.writeError(w, r, fmt.Errorf("v1 ack: %w", err))
		return
	}
	s.met.acked(deleted)
	s.writeJSON(w, http.StatusOK, mbx.OKResponse{OK: true})
}
