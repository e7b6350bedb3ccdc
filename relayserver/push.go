package relayserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/agentmbx/agentmbx/internal/bodylimit"
	"github.com/agentmbx/agentmbx/internal/failpoint"
	"github.com/agentmbx/agentmbx/mbx"
)

// Rejection codes of pushed items ("rejected:<code>").
const (
	RejectConflict        = "conflict"
	RejectDuplicateTarget = "duplicate target"
	RejectNotEnrolled     = "target not enrolled"
	RejectRevoked         = "target revoked"
	RejectSender          = "sender not accepted by target"
	RejectTooLarge        = "item too large"
	RejectRate            = "rate"
	RejectNotSealed       = "envelope body is not sealed"
	RejectEnvelopeID      = "item id is not the envelope id"
	RejectBadEnvelope     = "bad envelope"
	RejectBadReceipt      = "bad receipt"
	RejectQueueItems      = "quota:queue_items"
	RejectQueueBytes      = "quota:queue_bytes"
	RejectSenderItems     = "quota:sender_items"
	RejectSenderBytes     = "quota:sender_bytes"
	RejectOwnerItems      = "quota:owner_items"
	RejectOwnerBytes      = "quota:owner_bytes"
)

// rejection is an item's refusal; inside a store unit it rolls the item back.
type rejection struct{ code string }

func (r *rejection) Error() string { return "rejected:" + r.code }

func reject(code string) error { return &rejection{code: code} }

// pushTarget is a decoded target of a pushed item.
type pushTarget struct {
	pub  string
	wire []byte
	hash string
}

// pushWork is one item on its way through a push.
type pushWork struct {
	kind    Kind
	itemID  string
	targets []pushTarget
	// Filled by the checks and the store unit.
	code    string // rejection code, "" while the item is still in play
	seqs    []int64
	dup     bool         // every target was already stored
	added   []pushTarget // the targets the store unit inserted the item for
	firstAt time.Time
	// Relay-wide capacity (capacity.go): noRoom refuses the item's new targets; took is what
	// the item counted against the relay's limits.
	noRoom bool
	took   Counts
}

// parsePush decodes and checks the shape of a push body. Any malformed part fails the whole
// request (400) before anything is looked at, so nothing is stored. The wire bytes it decodes are
// taken from the request's ticket on the body budget first (ErrBusy when they do not fit), so a
// push in flight holds no more than the budget counts: its body and its wires.
func (s *Server) parsePush(body []byte, tk *bodylimit.Ticket) ([]*pushWork, error) {
	req, err := decodePushRequest(body)
	if err != nil {
		return nil, err
	}
	if len(req.Items) == 0 {
		return nil, fmt.Errorf("%w: no items", ErrBadRequest)
	}
	if len(req.Items) > s.lim.MaxBatch {
		return nil, fmt.Errorf("%w: %d items, max_batch is %d", ErrBadRequest, len(req.Items), s.lim.MaxBatch)
	}
	var wires int64
	for _, it := range req.Items {
		for _, t := range it.Targets {
			wires += int64(len(t.WireB64)) * 3 / 4
		}
	}
	if !tk.Take(wires) {
		return nil, fmt.Errorf("%w: the relay is busy decoding other pushes", ErrBusy)
	}
	work := make([]*pushWork, len(req.Items))
	slab := make([]pushWork, len(req.Items)) // the items in one allocation
	for i, it := range req.Items {
		k := Kind(it.Kind)
		if !k.Valid() {
			return nil, fmt.Errorf("%w: items[%d]: unknown kind %q", ErrBadRequest, i, it.Kind)
		}
		if it.ItemID == "" || utf16Len(it.ItemID) > mbx.MaxItemIDLen {
			return nil, fmt.Errorf("%w: items[%d]: item_id must be 1 to %d characters", ErrBadRequest, i, mbx.MaxItemIDLen)
		}
		if len(it.Targets) == 0 || len(it.Targets) > s.lim.MaxTargets {
			return nil, fmt.Errorf("%w: items[%d]: 1 to %d targets", ErrBadRequest, i, s.lim.MaxTargets)
		}
		w := &slab[i]
		*w = pushWork{kind: k, itemID: it.ItemID, targets: make([]pushTarget, len(it.Targets))}
		for j, t := range it.Targets {
			if !mbx.ValidPublicKey(t.HostPubkey) {
				return nil, fmt.Errorf("%w: items[%d].targets[%d]: host_pubkey is not a host key", ErrBadRequest, i, j)
			}
			wire, err := decodeWire(t.WireB64)
			if err != nil || len(wire) == 0 {
				return nil, fmt.Errorf("%w: items[%d].targets[%d]: wire_b64 is not base64 of the wire bytes", ErrBadRequest, i, j)
			}
			w.targets[j] = pushTarget{pub: t.HostPubkey, wire: wire, hash: mbx.WireHash(wire)}
		}
		work[i] = w
	}
	return work, nil
}

// checkItem applies the checks that need no state: size, repeated targets, and the wire rules of
// the kind. It sets w.code on a refusal.
func (s *Server) checkItem(w *pushWork, sender string) {
	for i, t := range w.targets {
		if slices.ContainsFunc(w.targets[:i], func(o pushTarget) bool { return o.pub == t.pub }) {
			w.code = RejectDuplicateTarget
			return
		}
		if int64(len(t.wire)) > s.lim.MaxItemBytes {
			w.code = RejectTooLarge
			return
		}
	}
	for _, t := range w.targets {
		switch w.kind {
		case KindEnvelope:
			w.code = checkEnvelopeWire(w.itemID, t.wire)
		case KindReceipt:
			if _, err := mbx.CheckReceiptWire(w.itemID, t.wire, sender); err != nil {
				w.code = RejectBadReceipt
				if errors.Is(err, mbx.ErrReceiptItemID) || errors.Is(err, mbx.ErrReceiptNotSender) {
					w.code = err.Error()
				}
			}
		}
		if w.code != "" {
			return
		}
	}
}

// checkEnvelopeWire checks what the relay can see of an envelope: it is a JSON object whose id is
// the item id, and its body is sealed (enc is an object). The wire is validated once and its
// top-level members are walked in place (envelopeMembers); nothing is decoded or copied unless a
// key or the id needs unescaping, when the generic decoder (checkEnvelopeDecoded) decides.
func checkEnvelopeWire(itemID string, wire []byte) string {
	if !json.Valid(wire) {
		return RejectBadEnvelope
	}
	id, enc, isObject, plain := envelopeMembers(wire)
	switch {
	case !isObject:
		return RejectBadEnvelope
	case !plain:
		return checkEnvelopeDecoded(itemID, wire)
	case len(id) < 2 || id[0] != '"' || string(id[1:len(id)-1]) != itemID:
		return RejectEnvelopeID
	case len(enc) == 0 || enc[0] != '{':
		return RejectNotSealed
	}
	return ""
}

// checkEnvelopeDecoded is checkEnvelopeWire through the generic decoder: member values stay raw
// bytes, so the sealed body is scanned and never decoded.
func checkEnvelopeDecoded(itemID string, wire []byte) string {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(wire, &m); err != nil || m == nil {
		return RejectBadEnvelope
	}
	var id string
	if err := json.Unmarshal(m["id"], &id); err != nil || id != itemID {
		return RejectEnvelopeID
	}
	if enc := m["enc"]; len(enc) == 0 || enc[0] != '{' {
		return RejectNotSealed
	}
	return ""
}

// envelopeMembers walks valid JSON: isObject tells whether it is an object, and id and enc are
// the raw values of its last "id" and "enc" members (nil when absent). plain is false when a key
// or the id string holds an escape or a non-ASCII byte, which only the decoder reads right.
func envelopeMembers(b []byte) (id, enc []byte, isObject, plain bool) {
	i := skipSpace(b, 0)
	if b[i] != '{' {
		return nil, nil, false, true
	}
	i = skipSpace(b, i+1)
	for b[i] != '}' {
		end := skipString(b, i)
		key := b[i+1 : end-1]
		if !plainBytes(key) {
			return nil, nil, true, false
		}
		i = skipSpace(b, skipSpace(b, end)+1) // past the colon
		vend := skipValue(b, i)
		switch string(key) {
		case "id":
			id = b[i:vend]
			if id[0] == '"' && !plainBytes(id[1:len(id)-1]) {
				return nil, nil, true, false
			}
		case "enc":
			enc = b[i:vend]
		}
		if i = skipSpace(b, vend); b[i] == ',' {
			i = skipSpace(b, i+1)
		}
	}
	return id, enc, true, true
}

// plainBytes reports whether b is ASCII without escapes.
func plainBytes(b []byte) bool {
	for _, c := range b {
		if c == '\\' || c >= 0x80 {
			return false
		}
	}
	return true
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index just past the string starting at b[i] (valid JSON).
func skipString(b []byte, i int) int {
	for i++; b[i] != '"'; i++ {
		if b[i] == '\\' {
			i++
		}
	}
	return i + 1
}

// skipValue returns the index just past the value starting at b[i] (valid JSON).
func skipValue(b []byte, i int) int {
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for ; ; i++ {
			switch b[i] {
			case '"':
				i = skipString(b, i) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
		}
	}
	for i < len(b) && !strings.ContainsRune(",}] \t\r\n", rune(b[i])) {
		i++
	}
	return i
}

// storeItem is the store unit of one item: every target is checked and inserted in turn; any
// refusal rolls the whole item back. adm, when not nil, holds what the request's earlier items
// learnt about their targets (admissions); w.added lists the inserts for the caller to count in
// once the item is stored.
func (s *Server) storeItem(tx Tx, w *pushWork, sender string, now time.Time, adm admissions) error {
	w.seqs = make([]int64, len(w.targets))
	w.dup = true
	w.added = w.added[:0]
	for i, t := range w.targets {
		item := Item{Target: t.pub, Kind: w.kind, ItemID: w.itemID, Sender: sender,
			Wire: t.wire, WireHash: t.hash, AcceptedAt: now, ExpiresAt: now.Add(s.lim.Retention())}
		var seq int64
		var err error
		if a := adm[t.pub]; a != nil {
			seq, err = s.storeAdmitted(tx, w, i, item, a)
		} else {
			seq, err = s.storeChecked(tx, w, i, item, adm)
		}
		if err != nil {
			return err
		}
		if seq != 0 {
			w.seqs[i] = seq
			w.added = append(w.added, pushTarget{pub: t.pub, wire: t.wire})
		}
	}
	if !w.dup {
		w.firstAt = now
	}
	return nil
}

// storeChecked stores target i of w after the full admission check and returns its new seq, or 0
// when it is a duplicate. A target that takes the item is remembered in adm.
func (s *Server) storeChecked(tx Tx, w *pushWork, i int, it Item, adm admissions) (int64, error) {
	a, err := tx.Admission(it.Sender, it.ItemID, it.Target)
	if err != nil {
		return 0, err
	}
	if a.Duplicate {
		return 0, w.duplicate(i, a.Dedup, it.WireHash)
	}
	w.dup = false
	switch {
	case !a.Enrolled:
		return 0, reject(RejectNotEnrolled)
	case !a.Target.Live():
		return 0, reject(RejectRevoked)
	case !a.Allowed:
		return 0, reject(RejectSender)
	}
	if w.noRoom {
		return 0, reject(RejectRelayQuota)
	}
	if code := s.quotaCode(a, int64(len(it.Wire))); code != "" {
		return 0, reject(code)
	}
	if adm != nil {
		a.Duplicate, a.Dedup = false, Dedup{}
		adm[it.Target] = &a
	}
	return tx.InsertItem(it)
}

// storeAdmitted stores target i of w, a target an earlier item of the request was admitted to:
// only the quotas are checked again (with the request's own inserts counted in), and the item is
// inserted at once; only when the insert finds it stored already, or a quota refuses it, is its
// dedup row read, since a duplicate is answered as such whatever the quotas say.
func (s *Server) storeAdmitted(tx Tx, w *pushWork, i int, it Item, a *Admission) (int64, error) {
	code := RejectRelayQuota
	if !w.noRoom {
		code = s.quotaCode(*a, int64(len(it.Wire)))
	}
	if code == "" {
		seq, err := tx.InsertItem(it)
		if !errors.Is(err, ErrDuplicate) {
			if err == nil {
				w.dup = false
			}
			return seq, err
		}
	}
	d, err := tx.Dedup(it.Sender, it.ItemID, it.Target)
	switch {
	case errors.Is(err, ErrNotFound) && code != "":
		w.dup = false
		return 0, reject(code)
	case err != nil:
		return 0, err
	}
	return 0, w.duplicate(i, d, it.WireHash)
}

// duplicate records that target i of w holds the item already (d), or refuses the item when the
// stored bytes differ.
func (w *pushWork) duplicate(i int, d Dedup, hash string) error {
	if d.WireHash != hash {
		return reject(RejectConflict)
	}
	w.seqs[i] = d.Seq
	if w.firstAt.IsZero() || d.AcceptedAt.Before(w.firstAt) {
		w.firstAt = d.AcceptedAt
	}
	return nil
}

// admissions holds, inside one push's store unit, the admission of each target an item of the
// push was stored for. Within the unit nothing but its own inserts changes what it says (they are
// counted in with add), so the push's later items for the target skip the admission query.
type admissions map[string]*Admission

// add counts an inserted item of n bytes for target in.
func (adm admissions) add(target string, n int64) {
	for _, b := range adm {
		b.SenderDedup++ // one sender per push: every target's admission counts its dedup rows
	}
	a := adm[target]
	if a == nil {
		return
	}
	a.Usage.Target.Items, a.Usage.Target.Bytes = a.Usage.Target.Items+1, a.Usage.Target.Bytes+n
	a.Usage.Sender.Items, a.Usage.Sender.Bytes = a.Usage.Sender.Items+1, a.Usage.Sender.Bytes+n
	if acct := a.Target.Account; acct != "" {
		for _, b := range adm {
			if b.Target.Account == acct {
				b.Account.Items, b.Account.Bytes = b.Account.Items+1, b.Account.Bytes+n
			}
		}
	}
}

// quotaCode is the rejection of an item of n bytes that would take the target's queue, the sender's
// share of it, the sender's dedup rows, or the target's proven account over its limits (docs/design.md: Quotas and bounds);
// "" when it fits. An unproven owner claim is never charged.
func (s *Server) quotaCode(a Admission, n int64) string {
	u := a.Usage
	switch {
	case u.Target.Items+1 > s.lim.MaxQueueItems:
		return RejectQueueItems
	case u.Target.Bytes+n > s.lim.MaxQueueBytes:
		return RejectQueueBytes
	case u.Sender.Items+1 > s.lim.MaxSenderItems:
		return RejectSenderItems
	case u.Sender.Bytes+n > s.lim.MaxSenderBytes:
		return RejectSenderBytes
	case s.opt.MaxSenderDedup > 0 && a.SenderDedup+1 > s.opt.MaxSenderDedup:
		return RejectSenderDedup
	}
	if a.Target.Account == "" {
		return ""
	}
	switch {
	case a.Account.Items+1 > s.lim.MaxOwnerItems:
		return RejectOwnerItems
	case a.Account.Bytes+n > s.lim.MaxOwnerBytes:
		return RejectOwnerBytes
	}
	return ""
}

func countFunc[T any](s []T, f func(T) bool) int {
	n := 0
	for _, v := range s {
		if f(v) {
			n++
		}
	}
	return n
}

// utf16Len is the length of s in UTF-16 code units, as JavaScript counts it.
func utf16Len(s string) int {
	n := 0
	for _, r := range s {
		n++
		if r >= 0x10000 {
			n++
		}
	}
	return n
}

// signChunk is the least number of accept statements worth a goroutine of their own.
const signChunk = 16

// pushResults fills results with each item's answer; the accept statements of a batch are signed
// in parallel across the cores. The statements' bytes are written into bufs, which must outlive
// the results (one buffer per worker: at least GOMAXPROCS of them).
func (s *Server) pushResults(results []mbx.PushResult, work []*pushWork, sender string, bufs []*mbx.AcceptBuf) error {
	workers := min(runtime.GOMAXPROCS(0), (len(work)+signChunk-1)/signChunk, len(bufs))
	if workers <= 1 {
		return s.resultRange(results, work, sender, 0, 1, bufs[0])
	}
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for k := range workers {
		wg.Go(func() { errs[k] = s.resultRange(results, work, sender, k, workers, bufs[k]) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// resultRange fills the results of items first, first+step, first+2·step, ... with the
// statements written into buf (one signing input, one arena).
func (s *Server) resultRange(results []mbx.PushResult, work []*pushWork, sender string, first, step int, buf *mbx.AcceptBuf) error {
	var at time.Time // the items of a push mostly share their acceptance time: spelled once
	var atISO string
	for i := first; i < len(work); i += step {
		it := work[i]
		if it.code != "" {
			results[i] = mbx.RejectedResult(it.itemID, it.code)
			continue
		}
		targets := make([]mbx.AcceptTarget, len(it.targets))
		for j, t := range it.targets {
			targets[j] = mbx.AcceptTarget{HostPubkey: t.pub, Seq: it.seqs[j], WireHash: t.hash}
		}
		status := mbx.StatusAccepted
		if it.dup {
			status = mbx.StatusDuplicate
		}
		if atISO == "" || !it.firstAt.Equal(at) {
			at, atISO = it.firstAt, mbx.ISOTime(it.firstAt)
		}
		a := mbx.Accept{V: 1, Type: mbx.AcceptType, RelayPubkey: s.pub, Epoch: s.epoch, SenderPubkey: sender,
			ItemID: it.itemID, Targets: targets, At: atISO}
		res, err := buf.Result(s.key, status, a)
		if err != nil {
			return err
		}
		results[i] = res
	}
	return nil
}

// acceptBufs are the statement buffers of the answers being written; a push takes one per
// signing worker and gives them back once its answer is written. A buffer whose arena grew past
// maxPooledAccepts (a huge batch's) is not kept.
var acceptBufs = sync.Pool{New: func() any { return new(mbx.AcceptBuf) }}

const maxPooledAccepts = 1 << 20

// takeAcceptBufs takes one statement buffer per signing worker of a push of n items.
func takeAcceptBufs(n int) []*mbx.AcceptBuf {
	bufs := make([]*mbx.AcceptBuf, max(1, min(runtime.GOMAXPROCS(0), (n+signChunk-1)/signChunk)))
	for i := range bufs {
		bufs[i] = acceptBufs.Get().(*mbx.AcceptBuf)
	}
	return bufs
}

// giveAcceptBufs returns bufs once nothing reads the results written into them.
func giveAcceptBufs(bufs []*mbx.AcceptBuf) {
	for _, b := range bufs {
		if b.Reset(); b.Cap() <= maxPooledAccepts {
			acceptBufs.Put(b)
		}
	}
}

// handlePush is POST /v2/relay/items (docs/design.md: Push and acceptance).
func (s *Server) handlePush(w http.ResponseWriter, r *http.Request) {
	// The items and targets are counted as the body arrives: a push over max_batch or max_targets
	// is refused before the rest is read, and nothing of it is decoded.
	caller, body, ok := s.signedBody(w, r, s.opt.MaxBody, s.pushCounter())
	if !ok {
		return
	}
	work, err := s.parsePush(body, ticketOf(r.Context()))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	now := s.opt.Clock()
	sender := caller.HostPubkey
	rated := !s.pushR.allow(sender, now)
	for _, it := range work {
		if rated {
			it.code = RejectRate
			continue
		}
		s.checkItem(it, sender)
	}
	s.takeCapacity(r.Context(), work, now)
	defer s.giveCapacity(work, &err)
	// Once queued, the unit's outcome is waited for even when the client goes away: a unit that
	// commits must wake the pulls held for its targets, and only its real outcome says whether it
	// did.
	ctx := context.WithoutCancel(r.Context())
	if n := countFunc(work, func(it *pushWork) bool { return it.code == "" }); n == 1 {
		// One item: the request's own unit is the item's, and a refusal rolls it back.
		it := work[slices.IndexFunc(work, func(it *pushWork) bool { return it.code == "" })]
		err = s.store.Update(ctx, func(tx Tx) error { return s.storeItem(tx, it, sender, now, nil) })
		if rj := (*rejection)(nil); errors.As(err, &rj) {
			it.code, err = rj.code, nil
		}
	} else if n > 1 {
		err = s.store.Update(ctx, func(tx Tx) error {
			adm := admissions{}
			for _, it := range work {
				if it.code != "" {
					continue
				}
				var err error
				if len(it.targets) == 1 {
					// Refused before anything is written: the item needs no savepoint of its own.
					err = s.storeItem(tx, it, sender, now, adm)
				} else {
					err = tx.Unit(func(tx Tx) error { return s.storeItem(tx, it, sender, now, adm) })
				}
				var rj *rejection
				switch {
				case errors.As(err, &rj):
					it.code = rj.code
				case err != nil:
					return err // a store failure fails the whole request; nothing is claimed
				default:
					for _, t := range it.added {
						adm.add(t.pub, int64(len(t.wire)))
					}
				}
			}
			return nil
		})
	}
	if err != nil {
		s.writeError(w, r, fmt.Errorf("push: %w", err))
		return
	}
	// The items are committed: wake the pulls parked for their targets.
	for _, it := range work {
		if it.code == "" && !it.dup {
			for _, t := range it.targets {
				s.polls.wake(t.pub)
			}
		}
	}
	resp := mbx.PushResponse{Results: make([]mbx.PushResult, len(work))}
	bufs := takeAcceptBufs(len(work))
	defer giveAcceptBufs(bufs) // once the answer is written: it holds the statements
	if err := s.pushResults(resp.Results, work, sender, bufs); err != nil {
		s.writeError(w, r, fmt.Errorf("push: sign accept: %w", err))
		return
	}
	s.met.pushed(work)
	_ = failpoint.Inject(FailAfterCommitBeforeResponse)
	bp := pullBufs.Get().(*[]byte)
	if b, ok := appendPushJSON((*bp)[:0], resp); ok {
		writeRawJSON(w, http.StatusOK, b)
		*bp = b[:0]
	} else {
		s.writeJSON(w, http.StatusOK, resp)
	}
	if cap(*bp) <= 4<<20 { // a huge answer's buffer is not kept
		pullBufs.Put(bp)
	}
}
