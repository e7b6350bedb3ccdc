// Package v1only is a relay that speaks only the v1 API, for tests: what a host meets at a
// relay of AgentMBX 0.5.x before 0.5.5 (docs/protocol.md: v1; the seed spec's "current state",
// G1-G13). It answers 404 to every /v2 route, so a client that negotiates (spec §11) falls back
// to v1.
//
// Like the relay of 0.5.3 it keeps everything in memory (Restart forgets it all, as a restart
// of that relay did), authenticates hops by host name with the pathname-only signature, routes
// envelopes by the host names of their recipients, remembers every envelope id it stored (a
// repeat counts as stored and is not queued again), numbers each host's queue from 1 and answers
// a pull with everything after the cursor and the last seq it allocated. It has no relay key, no
// accept statement, no epoch, no receipts and no expiry.
//
// It is not hardened: it trusts its callers' sizes and keeps no quotas. Tests only.
package v1only

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentmbx/agentmbx/mbx"
)

// Options configure a Relay.
type Options struct {
	// Clock is the relay's clock for hop windows (default time.Now).
	Clock func() time.Time
	// Rand makes challenges (default: a counter; tests only).
	Rand io.Reader
}

// Relay is a v1-only relay. It is an http.Handler; all methods are safe for concurrent use.
type Relay struct {
	clock func() time.Time
	rand  io.Reader

	mu         sync.Mutex
	enrolments []enrolment        // in enrolment order (name lookups take the first match, G5)
	challenges map[string]string  // host key → open challenge
	encAds     map[string]encAd   // host key → v1 ad
	queues     map[string][]Item  // host key → queued items, by seq
	seqs       map[string]int64   // host key → last seq allocated
	seen       map[string]bool    // envelope ids stored (G4: one set for all)
	calls      map[string]int     // "METHOD /path" → requests
	nonce      int                // challenge counter when Rand is nil
	hold       func(string) error // Refuse's hook
}

type enrolment struct{ host, pubkey string }

type encAd struct{ host, encPub, sig string }

// Item is one envelope queued for a host.
type Item struct {
	Seq      int64
	Envelope json.RawMessage
	From     string // the sender's host name
}

// New returns an empty relay.
func New(o Options) *Relay {
	r := &Relay{clock: o.Clock, rand: o.Rand}
	if r.clock == nil {
		r.clock = time.Now
	}
	r.reset()
	return r
}

func (r *Relay) reset() {
	r.enrolments = nil
	r.challenges = map[string]string{}
	r.encAds = map[string]encAd{}
	r.queues = map[string][]Item{}
	r.seqs = map[string]int64{}
	r.seen = map[string]bool{}
}

// Restart forgets every enrolment, ad and queued envelope, as a restart of a 0.5.3 relay did
// (G1): hosts get 401 until they enrol again, and mail they pushed before is gone.
func (r *Relay) Restart() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reset()
}

// Refuse makes the relay answer 503 to every request whose "METHOD /path" fn returns an error
// for (nil: answer normally). nil fn removes the hook.
func (r *Relay) Refuse(fn func(route string) error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.hold = fn
}

// Queued returns a copy of the items queued for the host key pub.
func (r *Relay) Queued(pub string) []Item {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Item(nil), r.queues[pub]...)
}

// Calls returns how many requests the relay got for route ("METHOD /path").
func (r *Relay) Calls(route string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls[route]
}

// Enrolled reports whether the host key pub is enrolled.
func (r *Relay) Enrolled(pub string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.enrolments {
		if e.pubkey == pub {
			return true
		}
	}
	return false
}

// EncAd returns the enc key of the v1 ad held for the host key pub ("" for none).
func (r *Relay) EncAd(pub string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.encAds[pub].encPub
}

func (r *Relay) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(io.LimitReader(req.Body, 16<<20))
	if err != nil {
		answer(w, 400, map[string]string{"error": "unreadable body"})
		return
	}
	route := req.Method + " " + req.URL.Path
	r.mu.Lock()
	if r.calls == nil {
		r.calls = map[string]int{}
	}
	r.calls[route]++
	hold := r.hold
	r.mu.Unlock()
	if hold != nil {
		if err := hold(route); err != nil {
			answer(w, 503, map[string]string{"error": err.Error()})
			return
		}
	}
	switch route {
	case "POST /v1/relay/challenge":
		r.challenge(w, body)
	case "POST /v1/relay/enrol":
		r.enrol(w, body)
	case "POST /v1/relay/enc-key", "GET /v1/relay/enc-key", "POST /v1/relay/messages", "GET /v1/relay/messages", "POST /v1/relay/ack":
		caller, ok := r.authenticate(req, body)
		if !ok {
			answer(w, 401, map[string]string{"error": "bad relay hop"})
			return
		}
		switch route {
		case "POST /v1/relay/enc-key":
			r.publishEncKey(w, caller, body)
		case "GET /v1/relay/enc-key":
			r.getEncKey(w, req.URL.Query().Get("host"))
		case "POST /v1/relay/messages":
			r.push(w, caller, body)
		case "GET /v1/relay/messages":
			r.pull(w, caller, req.URL.Query().Get("after"))
		default:
			r.ack(w, caller, body)
		}
	default:
		answer(w, 404, map[string]string{"error": "not found"})
	}
}

func answer(w http.ResponseWriter, status int, v any) {
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

func (r *Relay) challenge(w http.ResponseWriter, body []byte) {
	var req struct{ Host, Pubkey string }
	if json.Unmarshal(body, &req) != nil || req.Host == "" || !mbx.ValidPublicKey(req.Pubkey) {
		answer(w, 400, map[string]string{"error": "host and pubkey required"})
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var n string
	if r.rand != nil {
		b := make([]byte, 16)
		if _, err := io.ReadFull(r.rand, b); err != nil {
			answer(w, 500, map[string]string{"error": "no randomness"})
			return
		}
		n = base64.RawURLEncoding.EncodeToString(b)
	} else {
		r.nonce++
		n = "challenge-" + strconv.Itoa(r.nonce)
	}
	r.challenges[req.Pubkey] = n
	answer(w, 200, map[string]string{"challenge": n})
}

func (r *Relay) enrol(w http.ResponseWriter, body []byte) {
	var req struct {
		Host    string `json:"host"`
		Pubkey  string `json:"pubkey"`
		OwnerFP string `json:"owner_fp"`
		Sig     string `json:"sig"`
	}
	if json.Unmarshal(body, &req) != nil || req.Host == "" || req.Pubkey == "" || req.Sig == "" {
		answer(w, 400, map[string]string{"error": "incomplete enrolment"})
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	ch, ok := r.challenges[req.Pubkey]
	if !ok {
		answer(w, 401, map[string]string{"error": "no pending enrolment challenge"})
		return
	}
	in, err := mbx.Canonical(map[string]any{"v": 1, "challenge": ch, "host": req.Host, "pubkey": req.Pubkey, "owner_fp": req.OwnerFP})
	if err != nil || !mbx.Verify(req.Pubkey, in, req.Sig) {
		answer(w, 401, map[string]string{"error": "bad enrolment signature"})
		return
	}
	delete(r.challenges, req.Pubkey)
	for i, e := range r.enrolments {
		if e.pubkey == req.Pubkey {
			r.enrolments[i].host = req.Host
			answer(w, 200, map[string]bool{"ok": true})
			return
		}
	}
	r.enrolments = append(r.enrolments, enrolment{host: req.Host, pubkey: req.Pubkey})
	answer(w, 200, map[string]bool{"ok": true})
}

// authenticate finds the enrolment of x-mbx-host whose key signed the v1 hop.
func (r *Relay) authenticate(req *http.Request, body []byte) (enrolment, bool) {
	name := req.Header.Get(mbx.HeaderHost)
	r.mu.Lock()
	var cands []enrolment
	for _, e := range r.enrolments {
		if strings.EqualFold(e.host, name) {
			cands = append(cands, e)
		}
	}
	r.mu.Unlock()
	for _, e := range cands {
		if mbx.VerifyRelayHop(e.pubkey, req.Header, req.Method, req.URL.Path, body, r.clock()) == nil {
			return e, true
		}
	}
	return enrolment{}, false
}

func (r *Relay) publishEncKey(w http.ResponseWriter, caller enrolment, body []byte) {
	var req struct {
		EncPub string `json:"enc_pub"`
		Sig    string `json:"sig"`
	}
	if json.Unmarshal(body, &req) != nil || req.EncPub == "" || req.Sig == "" {
		answer(w, 400, map[string]string{"error": "enc_pub and sig required"})
		return
	}
	in, err := mbx.Canonical(map[string]any{"v": 1, "host": caller.host, "enc_pub": req.EncPub})
	if err != nil || !mbx.Verify(caller.pubkey, in, req.Sig) {
		answer(w, 401, map[string]string{"error": "bad enc-key signature"})
		return
	}
	r.mu.Lock()
	r.encAds[caller.pubkey] = encAd{host: caller.host, encPub: req.EncPub, sig: req.Sig}
	r.mu.Unlock()
	answer(w, 200, map[string]bool{"ok": true})
}

func (r *Relay) getEncKey(w http.ResponseWriter, host string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.enrolments {
		if strings.EqualFold(e.host, host) {
			if ad, ok := r.encAds[e.pubkey]; ok {
				answer(w, 200, map[string]string{"host": ad.host, "enc_pub": ad.encPub, "sig": ad.sig})
				return
			}
			break
		}
	}
	answer(w, 404, map[string]string{"error": "unknown host"})
}

// push stores envelopes in order until the first refusal (a partial batch is a 200, G2).
func (r *Relay) push(w http.ResponseWriter, caller enrolment, body []byte) {
	var req struct {
		Envelopes []json.RawMessage `json:"envelopes"`
	}
	if json.Unmarshal(body, &req) != nil || req.Envelopes == nil {
		answer(w, 400, map[string]string{"error": "bad batch"})
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	stored, why := 0, ""
	for _, raw := range req.Envelopes {
		if why = r.store(caller, raw); why != "" {
			break
		}
		stored++
	}
	res := map[string]any{"stored": stored}
	status := 200
	if why != "" {
		res["error"] = why
		if stored == 0 {
			status = 413
		}
	}
	answer(w, status, res)
}

// store queues one envelope for every host its recipients name; "" or why not.
func (r *Relay) store(caller enrolment, raw json.RawMessage) string {
	var e struct {
		ID  string          `json:"id"`
		To  []string        `json:"to"`
		Enc json.RawMessage `json:"enc"`
	}
	if json.Unmarshal(raw, &e) != nil || e.ID == "" || len(e.To) == 0 {
		return "bad envelope"
	}
	if len(e.Enc) == 0 || string(e.Enc) == "null" {
		return "envelope body is not sealed"
	}
	if r.seen[e.ID] {
		return "" // stored before: counts as stored (G4)
	}
	var targets []string
	for _, addr := range e.To {
		_, host, _ := strings.Cut(addr, "@")
		pub := ""
		for _, en := range r.enrolments {
			if host != "" && strings.EqualFold(en.host, host) {
				pub = en.pubkey
				break
			}
		}
		if pub == "" {
			return fmt.Sprintf("recipient host not enrolled: %s", host)
		}
		if !contains(targets, pub) {
			targets = append(targets, pub)
		}
	}
	for _, pub := range targets {
		r.seqs[pub]++
		r.queues[pub] = append(r.queues[pub], Item{Seq: r.seqs[pub], Envelope: append(json.RawMessage(nil), raw...), From: caller.host})
	}
	r.seen[e.ID] = true
	return ""
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

func (r *Relay) pull(w http.ResponseWriter, caller enrolment, afterQ string) {
	after, _ := strconv.ParseInt(afterQ, 10, 64)
	r.mu.Lock()
	defer r.mu.Unlock()
	items := []map[string]any{}
	for _, it := range r.queues[caller.pubkey] {
		if it.Seq > after {
			items = append(items, map[string]any{"seq": it.Seq, "envelope": it.Envelope, "from": it.From})
		}
	}
	answer(w, 200, map[string]any{"items": items, "cursor": r.seqs[caller.pubkey]})
}

func (r *Relay) ack(w http.ResponseWriter, caller enrolment, body []byte) {
	var req struct {
		Cursor float64 `json:"cursor"`
	}
	_ = json.Unmarshal(body, &req)
	r.mu.Lock()
	defer r.mu.Unlock()
	q := r.queues[caller.pubkey]
	keep := q[:0]
	for _, it := range q {
		if float64(it.Seq) > req.Cursor {
			keep = append(keep, it)
		}
	}
	r.queues[caller.pubkey] = keep
	answer(w, 200, map[string]bool{"ok": true})
}
