package host

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"

	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/outbox"
)

// The LAN wire, host to host. Every request but the two GETs carries a signed LAN hop
// (mbx.SignLANHop) that the receiver checks against the pinned key of the host it names.
//
//	POST /v2/envelopes  {"envelopes":[<sealed envelope>…]}  → {"results":[{"id","status"}…]}
//	POST /v1/envelopes  the same, for 0.5.x senders (a signed plaintext envelope is accepted)
//	POST /v1/receipts   {"receipts":[{rec, sig}…≤200]}      → {"results":[{"item","status"}…]}
//	GET  /v2/enc-key    → this host's signed v2 enc-key ad {ad, sig}
//	GET  /v2/status     → {host, host_pubkey, version}
//
// An unpaired host or a bad hop is answered 401 {"error"} and nothing is stored. Bodies are
// capped at MaxLANBody (413).
const (
	PathEnvelopes   = "/v2/envelopes"
	PathEnvelopesV1 = "/v1/envelopes"
	PathReceipts    = "/v1/receipts"
	PathEncKey      = "/v2/enc-key"
	PathStatus      = "/v2/status"

	// MaxLANBody caps a LAN request body: one sealed envelope of the largest body fits.
	MaxLANBody = 1<<20 + 64<<10
	// MaxLANEnvelopes caps the envelopes of one request.
	MaxLANEnvelopes = 200
	// maxLANAnswer caps what a sender reads of a peer's answer.
	maxLANAnswer = 1 << 20
)

// EnvelopesRequest is the body of POST /v2/envelopes. Each envelope is kept raw: it is verified
// over the bytes received.
type EnvelopesRequest struct {
	Envelopes []json.RawMessage `json:"envelopes"`
}

// EnvelopeResult is one entry of the answer to POST /v2/envelopes.
type EnvelopeResult struct {
	ID     string `json:"id"`
	Status string `json:"status"` // accepted, duplicate, rejected:<reason>
}

// EnvelopesResponse is the answer to POST /v2/envelopes.
type EnvelopesResponse struct {
	Results []EnvelopeResult `json:"results"`
}

// ReceiptsResponse is the answer to POST /v1/receipts.
type ReceiptsResponse struct {
	Results []ReceiptResult `json:"results"`
}

// LANStatus is the answer to GET /v2/status.
type LANStatus struct {
	Host       string `json:"host"`
	HostPubkey string `json:"host_pubkey"`
	Version    string `json:"version"`
}

// LANMux is the LAN server's mux; other parts of the host (pairing) register their routes on it
// before the daemon serves it.
func (h *Host) LANMux() *http.ServeMux { return h.lanMux }

func (h *Host) newLANMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+PathEnvelopes, h.handleEnvelopes)
	mux.HandleFunc("POST "+PathEnvelopesV1, h.handleEnvelopes)
	mux.HandleFunc("POST "+PathReceipts, h.handleReceipts)
	mux.HandleFunc("GET "+PathEncKey, h.handleEncKey)
	mux.HandleFunc("GET "+PathStatus, h.handleStatus)
	return mux
}

func writeLAN(w http.ResponseWriter, status int, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		status = http.StatusInternalServerError
		buf.Reset()
		buf.WriteString(`{"error":"encode answer failed"}` + "\n")
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(buf.Bytes())
}

func lanError(w http.ResponseWriter, status int, msg string) {
	writeLAN(w, status, map[string]string{"error": msg})
}

// authHop reads a hop-signed request: the named host must be a pinned peer (checked before the
// body is read), the body must fit MaxLANBody, and the hop must verify against the peer's pinned
// key within the window. On failure it has answered already (401, 413) and returns ok false.
func (h *Host) authHop(w http.ResponseWriter, r *http.Request) (PeerRecord, []byte, bool) {
	name := r.Header.Get(mbx.HeaderHost)
	if name == "" {
		lanError(w, http.StatusUnauthorized, "missing x-mbx-host")
		return PeerRecord{}, nil, false
	}
	peer, err := h.Peer(name)
	if err != nil {
		if errors.Is(err, ErrUnpaired) {
			lanError(w, http.StatusUnauthorized, "host not paired")
		} else {
			h.log.Error("LAN request: peer lookup", "err", err)
			lanError(w, http.StatusInternalServerError, "store error")
		}
		return PeerRecord{}, nil, false
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxLANBody))
	if err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			lanError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("body over %d bytes", MaxLANBody))
		} else {
			lanError(w, http.StatusBadRequest, "reading body failed")
		}
		return PeerRecord{}, nil, false
	}
	if err := mbx.VerifyLANHop(peer.HostPubkey, r.Header, r.Method, r.URL.EscapedPath(), body, h.clock()); err != nil {
		h.log.Warn("LAN request refused", "peer", name, "path", r.URL.Path, "err", err)
		lanError(w, http.StatusUnauthorized, "bad hop: "+err.Error())
		return PeerRecord{}, nil, false
	}
	h.lanUp(peer.Host) // it reached us over the LAN: try the LAN for new rows again
	return peer, body, true
}

func (h *Host) handleEnvelopes(w http.ResponseWriter, r *http.Request) {
	peer, body, ok := h.authHop(w, r)
	if !ok {
		return
	}
	var req EnvelopesRequest
	if err := json.Unmarshal(body, &req); err != nil || req.Envelopes == nil {
		lanError(w, http.StatusBadRequest, `body must be {"envelopes":[…]}`)
		return
	}
	if len(req.Envelopes) > MaxLANEnvelopes {
		lanError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("more than %d envelopes", MaxLANEnvelopes))
		return
	}
	wires := make([][]byte, len(req.Envelopes))
	for i, e := range req.Envelopes {
		wires[i] = e
	}
	sts, err := h.receiveBatch(peer, wires, r.URL.Path == PathEnvelopes)
	if err != nil {
		if errors.Is(err, ErrUnpaired) {
			lanError(w, http.StatusUnauthorized, "host not paired")
			return
		}
		h.log.Error("storing received envelopes", "peer", peer.Host, "err", err)
		lanError(w, http.StatusInternalServerError, "store error")
		return
	}
	res := EnvelopesResponse{Results: make([]EnvelopeResult, len(sts))}
	for i, st := range sts {
		res.Results[i] = EnvelopeResult{ID: envelopeID(wires[i]), Status: st}
	}
	writeLAN(w, http.StatusOK, res)
}

// envelopeID reads the id of envelope bytes leniently, for answers ("" when there is none).
func envelopeID(wire []byte) string {
	var x struct {
		ID any `json:"id"`
	}
	if json.Unmarshal(wire, &x) != nil {
		return ""
	}
	s, _ := x.ID.(string)
	if len(s) > 100 {
		s = s[:100]
	}
	return s
}

func (h *Host) handleReceipts(w http.ResponseWriter, r *http.Request) {
	peer, body, ok := h.authHop(w, r)
	if !ok {
		return
	}
	var req mbx.ReceiptsRequest
	if err := json.Unmarshal(body, &req); err != nil || req.Receipts == nil {
		lanError(w, http.StatusBadRequest, `body must be {"receipts":[…]}`)
		return
	}
	if len(req.Receipts) > mbx.ReceiptBatchMax {
		lanError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("more than %d receipts", mbx.ReceiptBatchMax))
		return
	}
	res, err := h.AcceptReceipts(req.Receipts, peer.Host)
	if err != nil {
		h.log.Error("storing received receipts", "peer", peer.Host, "err", err)
		lanError(w, http.StatusInternalServerError, "store error")
		return
	}
	h.kickOutbox()
	writeLAN(w, http.StatusOK, ReceiptsResponse{Results: res})
}

func (h *Host) handleEncKey(w http.ResponseWriter, _ *http.Request) {
	ad, sig, err := mbx.SignEncAdV2(h.name, h.key, h.enc.PublicKey(), h.clock(), 0)
	if err == nil {
		var pub mbx.EncAdPublish
		if pub, err = ad.Publish(sig); err == nil {
			writeLAN(w, http.StatusOK, pub)
			return
		}
	}
	h.log.Error("signing enc-key ad", "err", err)
	lanError(w, http.StatusInternalServerError, "signing failed")
}

func (h *Host) handleStatus(w http.ResponseWriter, _ *http.Request) {
	writeLAN(w, http.StatusOK, LANStatus{Host: h.name, HostPubkey: h.key.PublicKey(), Version: Version})
}

// ---- sending -----------------------------------------------------------------------------------

// Transport sends due outbox rows to one peer host: the LAN (lanTransport) or the pinned relay
// (relayTransport); transportFor picks one per row, and rows carry the transport they last used.
type Transport interface {
	// Kind is the outbox transport this one records on the rows it attempts.
	Kind() outbox.Transport
	// Send attempts rows, all for peer, and returns one outcome per row, in order. It stores
	// nothing: the caller records the outcomes.
	Send(ctx context.Context, peer PeerRecord, rows []outbox.Row) []Outcome
}

// OutcomeKind is what became of one attempt.
type OutcomeKind int

// Outcomes of an attempt.
const (
	// OutcomeDelivered: the peer stored the item (or had it already).
	OutcomeDelivered OutcomeKind = iota + 1
	// OutcomeFailed: no answer for the item (network, 5xx, 401, a missing result); retried
	// with backoff.
	OutcomeFailed
	// OutcomeRejected: the peer refused the item for good; the row ends rejected.
	OutcomeRejected
	// OutcomeRelayAccepted: the relay durably accepted the item (relay transport).
	OutcomeRelayAccepted
)

func (k OutcomeKind) String() string {
	switch k {
	case OutcomeDelivered:
		return "delivered"
	case OutcomeFailed:
		return "failed"
	case OutcomeRejected:
		return "rejected"
	case OutcomeRelayAccepted:
		return "relay-accepted"
	}
	return "OutcomeKind(" + strconv.Itoa(int(k)) + ")"
}

// Outcome is the result of one row's attempt.
type Outcome struct {
	Kind OutcomeKind
	Err  string // failure or rejection reason
	// Retryable marks a rejection that a later retry can get past (a relay quota or rate limit):
	// the row stays pending with backoff instead of ending rejected.
	Retryable  bool
	Acceptance *outbox.Acceptance // OutcomeRelayAccepted only
	relayKey   string             // OutcomeRelayAccepted: the pinned relay key the statement verified against
	// unreachable marks a LAN failure without any answer from the peer (no connection, no
	// response): its LAN address is unreachable now.
	unreachable bool
}

// unreachableAll is failedAll for a LAN request that got no answer at all.
func unreachableAll(n int, msg string) []Outcome {
	out := failedAll(n, msg)
	for i := range out {
		out[i].unreachable = true
	}
	return out
}

func failedAll(n int, msg string) []Outcome {
	out := make([]Outcome, n)
	for i := range out {
		out[i] = Outcome{Kind: OutcomeFailed, Err: msg}
	}
	return out
}

// lanTransport sends over the LAN with signed hops.
type lanTransport struct{ h *Host }

func (t *lanTransport) Kind() outbox.Transport { return outbox.TransportLAN }

func (t *lanTransport) Send(ctx context.Context, peer PeerRecord, rows []outbox.Row) []Outcome {
	out := make([]Outcome, len(rows))
	var env, rec []int
	for i, r := range rows {
		if r.Kind == outbox.KindReceipt {
			rec = append(rec, i)
		} else {
			env = append(env, i)
		}
	}
	// Envelopes in batches that fit the receiver's body cap.
	for len(env) > 0 {
		n, size := 0, 64
		for n < len(env) && n < MaxLANEnvelopes && (n == 0 || size+len(rows[env[n]].Wire)+1 <= MaxLANBody-1024) {
			size += len(rows[env[n]].Wire) + 1
			n++
		}
		batch := env[:n]
		env = env[n:]
		res := t.sendEnvelopes(ctx, peer, rows, batch, true)
		for j, i := range batch {
			out[i] = res[j]
		}
	}
	for len(rec) > 0 {
		n := min(len(rec), mbx.ReceiptBatchMax)
		batch := rec[:n]
		rec = rec[n:]
		res := t.sendReceipts(ctx, peer, rows, batch)
		for j, i := range batch {
			out[i] = res[j]
		}
	}
	return out
}

// joinRaw builds {"<field>":[w0,w1,…]} from exact bytes.
func joinRaw(field string, rows []outbox.Row, idx []int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"` + field + `":[`)
	for j, i := range idx {
		if j > 0 {
			b.WriteByte(',')
		}
		b.Write(rows[i].Wire)
	}
	b.WriteString("]}")
	return b.Bytes()
}

// post sends a hop-signed POST to the peer and returns the status and the answer body.
func (t *lanTransport) post(ctx context.Context, peer PeerRecord, path string, body []byte) (int, []byte, error) {
	h := t.h
	if peer.Addr == "" {
		return 0, nil, fmt.Errorf("no LAN address known for %s", peer.Host)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+peer.Addr+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	hdr := mbx.SignLANHop(h.key, h.name, h.lanPortHint(), http.MethodPost, path, body, h.clock())
	for k, v := range hdr {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := h.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxLANAnswer))
	if err != nil {
		return resp.StatusCode, nil, fmt.Errorf("reading answer: %w", err)
	}
	return resp.StatusCode, data, nil
}

func answerError(status int, data []byte) string {
	var e struct {
		Error string `json:"error"`
	}
	msg := ""
	if json.Unmarshal(data, &e) == nil {
		msg = e.Error
	}
	if len(msg) > 200 {
		msg = msg[:200]
	}
	s := fmt.Sprintf("peer answered %d %s", status, http.StatusText(status))
	if msg != "" {
		s += ": " + msg
	}
	if status == http.StatusUnauthorized {
		s += " (does the peer still pin this host? are the clocks within 5 minutes?)"
	}
	return s
}

func (t *lanTransport) sendEnvelopes(ctx context.Context, peer PeerRecord, rows []outbox.Row, idx []int, split bool) []Outcome {
	status, data, err := t.post(ctx, peer, PathEnvelopes, joinRaw("envelopes", rows, idx))
	if err != nil {
		return unreachableAll(len(idx), err.Error())
	}
	switch {
	case status == http.StatusOK:
	case (status == http.StatusBadRequest || status == http.StatusRequestEntityTooLarge) && len(idx) == 1:
		return []Outcome{{Kind: OutcomeRejected, Err: answerError(status, data)}}
	case (status == http.StatusBadRequest || status == http.StatusRequestEntityTooLarge) && split:
		// Find the one the peer cannot take: send them one by one.
		out := make([]Outcome, 0, len(idx))
		for _, i := range idx {
			out = append(out, t.sendEnvelopes(ctx, peer, rows, []int{i}, false)...)
		}
		return out
	default:
		return failedAll(len(idx), answerError(status, data))
	}
	var res EnvelopesResponse
	if err := json.Unmarshal(data, &res); err != nil {
		return failedAll(len(idx), "peer answer is not JSON results")
	}
	byID := map[string]string{}
	for _, r := range res.Results {
		byID[r.ID] = r.Status
	}
	out := make([]Outcome, len(idx))
	for j, i := range idx {
		st, ok := byID[rows[i].ItemID]
		switch {
		case !ok:
			out[j] = Outcome{Kind: OutcomeFailed, Err: "peer answer has no result for the envelope"}
		case st == StatusAccepted || st == StatusDuplicate:
			out[j] = Outcome{Kind: OutcomeDelivered}
		case strings.HasPrefix(st, statusRejected):
			out[j] = Outcome{Kind: OutcomeRejected, Err: st}
		default:
			out[j] = Outcome{Kind: OutcomeFailed, Err: "peer answered status " + clip(st, 100)}
		}
	}
	return out
}

func (t *lanTransport) sendReceipts(ctx context.Context, peer PeerRecord, rows []outbox.Row, idx []int) []Outcome {
	status, data, err := t.post(ctx, peer, PathReceipts, joinRaw("receipts", rows, idx))
	if err != nil {
		return unreachableAll(len(idx), err.Error())
	}
	if status != http.StatusOK {
		return failedAll(len(idx), answerError(status, data))
	}
	var res ReceiptsResponse
	if err := json.Unmarshal(data, &res); err != nil {
		return failedAll(len(idx), "peer answer is not JSON results")
	}
	byItem := map[string]ReceiptStatus{}
	for _, r := range res.Results {
		byItem[r.Item] = r.Status
	}
	out := make([]Outcome, len(idx))
	for j, i := range idx {
		st, ok := byItem[rows[i].ItemID]
		switch {
		case !ok:
			out[j] = Outcome{Kind: OutcomeFailed, Err: "peer answer has no result for the receipt"}
		case st == mbx.StatusAccepted || st == StatusDuplicate || st == "stale":
			out[j] = Outcome{Kind: OutcomeDelivered}
		case strings.HasPrefix(string(st), statusRejected):
			out[j] = Outcome{Kind: OutcomeRejected, Err: string(st)}
		default:
			out[j] = Outcome{Kind: OutcomeFailed, Err: "peer answered status " + clip(string(st), 100)}
		}
	}
	return out
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// lanPortHint is the port the daemon listens on (sent as the unsigned x-mbx-port hint), or 0.
func (h *Host) lanPortHint() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lanPort
}

// splitListen checks a listen or dial address host:port (the host may be empty for a listen
// address) and returns its parts.
func splitListen(s string) (string, int, error) {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return "", 0, fmt.Errorf("address %q: want host:port", clip(s, 64))
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 0 || n > 65535 {
		return "", 0, fmt.Errorf("address %q: bad port", clip(s, 64))
	}
	return host, n, nil
}
