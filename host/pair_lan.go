package host

import (
	"bytes"
	"context"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/agentmbx/agentmbx/mbx"
)

// The pairing routes of the LAN server. They carry no LAN hop (the hosts are not paired yet);
// the token MACs authenticate them. The flow is described in pair.go.
const (
	pathPairHello   = "/v2/pair/hello"
	pathPairJoin    = "/v2/pair/join"
	pathPairConfirm = "/v2/pair/confirm"

	pairProto        = "agentmbx-pair-token-v1"
	pairMaxBody      = 16 << 10
	pairMaxAnswer    = 64 << 10
	pairMaxMACLen    = 100
	pairMaxAddrLen   = 300
	pairConfirmLabel = "confirm-"
)

var pairNonceRE = regexp.MustCompile(`^[A-Za-z0-9_-]{16,64}$`)

// pairWireCodes maps the pairing errors to their wire status and code, both ways.
var pairWireCodes = []struct {
	err    error
	status int
	code   string
}{
	{ErrNoPairing, http.StatusNotFound, "no_pairing"},
	{ErrPairExpired, http.StatusGone, "expired"},
	{ErrPairBurned, http.StatusGone, "burned"},
	{ErrPairDeclined, http.StatusGone, "declined"},
	{ErrPairCancelled, http.StatusGone, "cancelled"},
	{ErrPairToken, http.StatusForbidden, "bad_token"},
	{ErrPairConflict, http.StatusConflict, "conflict"},
	{ErrPairState, http.StatusConflict, "state"},
	{ErrPairProtocol, http.StatusBadRequest, "bad_request"},
}

// pairWireCode is the status and code of err ("internal", 500 for anything else).
func pairWireCode(err error) (int, string) {
	for _, c := range pairWireCodes {
		if errors.Is(err, c.err) {
			return c.status, c.code
		}
	}
	return http.StatusInternalServerError, "internal"
}

// pairTransientError marks a failure worth retrying: the inviter was unreachable or answered
// 5xx / 429.
type pairTransientError struct{ err error }

func (e *pairTransientError) Error() string { return e.err.Error() }
func (e *pairTransientError) Unwrap() error { return e.err }

type pairWireError struct {
	Error        string `json:"error"`
	Code         string `json:"code"`
	AttemptsLeft *int   `json:"attempts_left,omitempty"`
}

type pairHello struct {
	V           int     `json:"v"`
	Proto       string  `json:"proto"`
	Host        string  `json:"host"`
	HostPubkey  string  `json:"host_pubkey"`
	OwnerPubkey *string `json:"owner_pubkey"`
	Nonce       string  `json:"nonce"`
	ExpiresAt   string  `json:"expires_at"`
}

type pairPartyWire struct {
	Host        string  `json:"host"`
	HostPubkey  string  `json:"host_pubkey"`
	OwnerPubkey *string `json:"owner_pubkey"`
	Nonce       string  `json:"nonce"`
	Addr        *string `json:"addr,omitempty"`
}

type pairJoinRequest struct {
	V       int              `json:"v"`
	ANonce  string           `json:"a_nonce"`
	B       pairPartyWire    `json:"b"`
	MACJoin string           `json:"mac_join"`
	EncAd   mbx.EncAdPublish `json:"enc_ad"`
}

type pairJoinAnswer struct {
	MACAccept string           `json:"mac_accept"`
	EncAd     mbx.EncAdPublish `json:"enc_ad"`
}

type pairConfirmRequest struct {
	V      int    `json:"v"`
	ANonce string `json:"a_nonce"`
	BNonce string `json:"b_nonce"`
	Accept bool   `json:"accept"`
	MAC    string `json:"mac"`
}

type pairConfirmAnswer struct {
	State  string `json:"state"` // waiting, done, declined
	Accept bool   `json:"accept"`
	MAC    string `json:"mac,omitempty"`
}

func wireParty(p mbx.PairParty, addr *string) pairPartyWire {
	w := pairPartyWire{Host: p.Host, HostPubkey: p.HostPubkey, Nonce: p.Nonce, Addr: addr}
	if p.OwnerPubkey != "" {
		w.OwnerPubkey = &p.OwnerPubkey
	}
	return w
}

// party checks a party's fields and returns it.
func (w pairPartyWire) party() (mbx.PairParty, error) {
	switch {
	case !ValidHostName(w.Host):
		return mbx.PairParty{}, fmt.Errorf("%w: host name %q", ErrPairProtocol, cardClip(w.Host))
	case !mbx.ValidPublicKey(w.HostPubkey):
		return mbx.PairParty{}, fmt.Errorf("%w: host_pubkey", ErrPairProtocol)
	case w.OwnerPubkey != nil && !mbx.ValidPublicKey(*w.OwnerPubkey):
		return mbx.PairParty{}, fmt.Errorf("%w: owner_pubkey", ErrPairProtocol)
	case !pairNonceRE.MatchString(w.Nonce):
		return mbx.PairParty{}, fmt.Errorf("%w: nonce", ErrPairProtocol)
	}
	p := mbx.PairParty{Host: w.Host, HostPubkey: w.HostPubkey, Nonce: w.Nonce}
	if w.OwnerPubkey != nil {
		p.OwnerPubkey = *w.OwnerPubkey
	}
	return p, nil
}

func (hl pairHello) party() (mbx.PairParty, error) {
	if hl.V != 1 || hl.Proto != pairProto {
		return mbx.PairParty{}, fmt.Errorf("%w: hello of another version (v %d, proto %q)", ErrPairProtocol, hl.V, cardClip(hl.Proto))
	}
	return pairPartyWire{Host: hl.Host, HostPubkey: hl.HostPubkey, OwnerPubkey: hl.OwnerPubkey, Nonce: hl.Nonce}.party()
}

// checkAdvertisedAddr checks the joiner's addr: empty, or host:port with a port from 1 to 65535
// (the host may be empty or unspecified: the inviter fills it in).
func checkAdvertisedAddr(s string) error {
	if s == "" {
		return nil
	}
	if len(s) > pairMaxAddrLen {
		return fmt.Errorf("%w: addr too long", ErrPairProtocol)
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil || strings.ContainsFunc(host, func(r rune) bool { return r <= ' ' || r == 0x7f || r == '/' }) {
		return fmt.Errorf("%w: addr %q", ErrPairProtocol, cardClip(s))
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 || port != strconv.Itoa(n) {
		return fmt.Errorf("%w: addr %q: bad port", ErrPairProtocol, cardClip(s))
	}
	return nil
}

// resolvePeerAddr is the address to pin for a joiner that advertised adv from remote (the
// request's RemoteAddr): adv, with an empty or unspecified host replaced by remote's IP.
func resolvePeerAddr(adv, remote string) string {
	host, port, err := net.SplitHostPort(adv)
	if err != nil {
		return ""
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		rh, _, err := net.SplitHostPort(remote)
		if err != nil {
			return ""
		}
		host = rh
	}
	return net.JoinHostPort(host, port)
}

// pairConfirmMAC is the MAC of a confirmation (label "confirm-b" from the joiner, "confirm-a"
// from the inviter): base64url without padding of HMAC-SHA256 keyed by HKDF-SHA256(ikm = token
// key bytes, salt "agentmbx-pair-token-v1", info "mac:" + label, 32 bytes) over
// label + "\n" + transcript + "\n" + "accept" or "decline".
func pairConfirmMAC(keyHex, label string, transcript []byte, accept bool) (string, error) {
	if !strings.HasPrefix(label, pairConfirmLabel) {
		return "", fmt.Errorf("pair confirm mac: bad label %q", label)
	}
	ikm, err := hex.DecodeString(keyHex)
	if err != nil || len(ikm) != 32 {
		return "", errors.New("pair confirm mac: bad token key")
	}
	k, err := hkdf.Key(sha256.New, ikm, []byte(pairProto), "mac:"+label, 32)
	if err != nil {
		return "", fmt.Errorf("pair confirm mac: %w", err)
	}
	m := hmac.New(sha256.New, k)
	m.Write([]byte(label + "\n"))
	m.Write(transcript)
	if accept {
		m.Write([]byte("\naccept"))
	} else {
		m.Write([]byte("\ndecline"))
	}
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil)), nil
}

// registerPairRoutes puts the pairing routes on the host's LAN mux (once per host).
func (h *Host) registerPairRoutes(p *pairer) {
	p.routes.Do(func() {
		h.lanMux.HandleFunc("GET "+pathPairHello, func(w http.ResponseWriter, r *http.Request) { h.serveHello(p, w, r) })
		h.lanMux.HandleFunc("POST "+pathPairJoin, func(w http.ResponseWriter, r *http.Request) { h.serveJoin(p, w, r) })
		h.lanMux.HandleFunc("POST "+pathPairConfirm, func(w http.ResponseWriter, r *http.Request) { h.serveConfirm(p, w, r) })
	})
}

func pairWriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func pairWriteErr(w http.ResponseWriter, err error, attemptsLeft *int) {
	status, code := pairWireCode(err)
	msg := err.Error()
	if status == http.StatusInternalServerError {
		msg = "internal error"
	}
	pairWriteJSON(w, status, pairWireError{Error: msg, Code: code, AttemptsLeft: attemptsLeft})
}

// pairDecode reads a pairing request body strictly (known fields only, one value, capped).
func pairDecode(w http.ResponseWriter, r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, pairMaxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: %v", ErrPairProtocol, err)
	}
	if dec.More() {
		return fmt.Errorf("%w: data after the request", ErrPairProtocol)
	}
	return nil
}

// inviterLocked returns the open inviter session (expired ones are ended first), or the error
// that explains why there is none.
func (p *pairer) inviterLocked(now time.Time) (*pairSession, error) {
	s := p.s
	if s == nil || s.role != PairInviter {
		return nil, ErrNoPairing
	}
	p.expireLocked(s, now)
	return s, nil
}

// badMACLocked counts a wrong MAC and burns the token at MaxPairAttempts.
func (h *Host) badMACLocked(p *pairer, s *pairSession, r *http.Request, step string) (*int, error) {
	s.attempts++
	left := MaxPairAttempts - s.attempts
	h.log.Warn("pairing: wrong token MAC", "step", step, "from", r.RemoteAddr, "attempts_left", max(left, 0))
	if left <= 0 {
		p.finishLocked(s, PairFailed, ErrPairBurned)
		h.log.Warn("pairing: token burned", "attempts", s.attempts)
		return nil, ErrPairBurned
	}
	return &left, fmt.Errorf("%w (%d attempts left)", ErrPairToken, left)
}

func (h *Host) serveHello(p *pairer, w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s, err := p.inviterLocked(h.clock())
	if err == nil && s.state != PairWaiting {
		err = s.err
		if err == nil {
			err = fmt.Errorf("%w: the token has been used", ErrPairState)
		}
	}
	if err != nil {
		pairWriteErr(w, err, nil)
		return
	}
	pairWriteJSON(w, http.StatusOK, pairHello{V: 1, Proto: pairProto, Host: s.a.Host, HostPubkey: s.a.HostPubkey,
		Nonce: s.a.Nonce, ExpiresAt: mbx.ISOTime(s.expires)})
}

func (h *Host) serveJoin(p *pairer, w http.ResponseWriter, r *http.Request) {
	var req pairJoinRequest
	if err := pairDecode(w, r, &req); err != nil {
		pairWriteErr(w, err, nil)
		return
	}
	b, err := req.B.party()
	if err == nil && (req.V != 1 || req.B.Addr == nil || req.MACJoin == "" || len(req.MACJoin) > pairMaxMACLen) {
		err = fmt.Errorf("%w: join needs v 1, b.addr and mac_join", ErrPairProtocol)
	}
	if err == nil {
		err = checkAdvertisedAddr(*req.B.Addr)
	}
	if err != nil {
		pairWriteErr(w, err, nil)
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := h.clock()
	s, err := p.inviterLocked(now)
	switch {
	case err != nil:
	case s.state.Final():
		err = s.err
		if err == nil {
			err = fmt.Errorf("%w: the token has been used", ErrPairState)
		}
	case s.state != PairWaiting:
		err = fmt.Errorf("%w: the token has been used", ErrPairState)
	case req.ANonce != s.a.Nonce:
		err = fmt.Errorf("%w: the join answers another pairing session", ErrPairState)
	}
	if err != nil {
		pairWriteErr(w, err, nil)
		return
	}
	transcript, err := mbx.JoinTranscript(s.a, b, *req.B.Addr)
	if err != nil {
		pairWriteErr(w, fmt.Errorf("%w: %v", ErrPairProtocol, err), nil)
		return
	}
	want, err := mbx.PairMAC(s.key, mbx.PairMACJoin, transcript)
	if err != nil {
		pairWriteErr(w, err, nil)
		return
	}
	if !mbx.PairMACEqual(want, req.MACJoin) {
		left, err := h.badMACLocked(p, s, r, "join")
		pairWriteErr(w, err, left)
		return
	}
	ad, err := mbx.CheckEncAd(req.EncAd.Ad, req.EncAd.Sig, mbx.EncAdPeer{Host: b.Host, HostPubkey: b.HostPubkey}, now)
	if err != nil {
		pairWriteErr(w, fmt.Errorf("%w: the joiner's enc-key ad: %w", ErrPairProtocol, err), nil)
		return
	}
	if err := h.pairConflict(b.Host, b.HostPubkey); err != nil {
		p.finishLocked(s, PairFailed, err)
		h.log.Warn("pairing refused", "peer", b.Host, "err", err)
		pairWriteErr(w, err, nil)
		return
	}
	accept, err := mbx.PairMAC(s.key, mbx.PairMACAccept, transcript)
	if err != nil {
		pairWriteErr(w, err, nil)
		return
	}
	myAd, err := h.pairEncAd()
	if err != nil {
		pairWriteErr(w, err, nil)
		return
	}
	s.b, s.bAddr, s.transcript = b, *req.B.Addr, transcript
	s.code = mbx.PairingCode(s.a, b)
	s.peer = PeerRecord{Host: b.Host, HostPubkey: b.HostPubkey, EncPub: ad.EncPub, Addr: resolvePeerAddr(s.bAddr, r.RemoteAddr)}
	s.state = PairCode
	s.expires = now.Add(PairConfirmWindow)
	p.notifyLocked()
	h.log.Info("pairing: joined", "role", "inviter", "peer", b.Host, "fingerprint", mbx.Fingerprint(b.HostPubkey), "addr", s.peer.Addr)
	pairWriteJSON(w, http.StatusOK, pairJoinAnswer{MACAccept: accept, EncAd: myAd})
}

func (h *Host) serveConfirm(p *pairer, w http.ResponseWriter, r *http.Request) {
	var req pairConfirmRequest
	if err := pairDecode(w, r, &req); err != nil {
		pairWriteErr(w, err, nil)
		return
	}
	if req.V != 1 || req.MAC == "" || len(req.MAC) > pairMaxMACLen {
		pairWriteErr(w, fmt.Errorf("%w: confirm needs v 1 and mac", ErrPairProtocol), nil)
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	s, err := p.inviterLocked(h.clock())
	switch {
	case err != nil:
	case s.transcript == nil:
		err = s.err
		if err == nil {
			err = fmt.Errorf("%w: no join yet", ErrPairState)
		}
	case req.ANonce != s.a.Nonce || req.BNonce != s.b.Nonce:
		err = fmt.Errorf("%w: the confirmation answers another pairing session", ErrPairState)
	}
	if err != nil {
		pairWriteErr(w, err, nil)
		return
	}
	want, err := pairConfirmMAC(s.key, "confirm-b", s.transcript, req.Accept)
	if err != nil {
		pairWriteErr(w, err, nil)
		return
	}
	if !mbx.PairMACEqual(want, req.MAC) {
		if s.state.Final() {
			pairWriteErr(w, fmt.Errorf("%w: confirmation MAC", ErrPairToken), nil)
			return
		}
		left, err := h.badMACLocked(p, s, r, "confirm")
		pairWriteErr(w, err, left)
		return
	}
	if !s.state.Final() {
		switch {
		case !req.Accept:
			s.theirs = declined
			h.log.Info("pairing declined by the joiner", "peer", s.peer.Host)
			p.finishLocked(s, PairDeclined, fmt.Errorf("%w by the joining host", ErrPairDeclined))
		case s.theirs == declined:
			pairWriteErr(w, fmt.Errorf("%w: the joiner declined already", ErrPairState), nil)
			return
		default:
			if s.theirs != accepted {
				s.theirs = accepted
				p.notifyLocked()
			}
			if s.mine == accepted {
				h.completeLocked(p, s)
			}
		}
	}
	// Hold the request until this side's user decides, for at most pairLongPoll.
	hold := time.NewTimer(pairLongPoll)
	defer hold.Stop()
	for !s.state.Final() {
		ch := p.changed
		until := s.expires.Sub(h.clock())
		p.mu.Unlock()
		var done bool
		select {
		case <-ch:
		case <-hold.C:
			done = true
		case <-r.Context().Done():
			done = true
		case <-time.After(until + 10*time.Millisecond):
		}
		p.mu.Lock()
		p.expireLocked(s, h.clock())
		if done {
			break
		}
	}
	switch s.state {
	case PairDone, PairDeclined:
		ok := s.state == PairDone
		mac, err := pairConfirmMAC(s.key, "confirm-a", s.transcript, ok)
		if err != nil {
			pairWriteErr(w, err, nil)
			return
		}
		state := "declined"
		if ok {
			state = "done"
		}
		pairWriteJSON(w, http.StatusOK, pairConfirmAnswer{State: state, Accept: ok, MAC: mac})
	case PairCode, PairConfirmed:
		pairWriteJSON(w, http.StatusOK, pairConfirmAnswer{State: "waiting"})
	default:
		pairWriteErr(w, s.err, nil)
	}
}

// pairCall makes one pairing request to the inviter at dial and decodes a 200 answer into out;
// an error answer becomes the matching pairing error.
func (h *Host) pairCall(ctx context.Context, method, dial, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		raw, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://"+dial+path, body)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := h.client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return &pairTransientError{fmt.Errorf("%s %s: %w", method, path, err)}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, pairMaxAnswer+1))
	if err != nil {
		return &pairTransientError{fmt.Errorf("%s %s: %w", method, path, err)}
	}
	if len(raw) > pairMaxAnswer {
		return fmt.Errorf("%w: answer larger than %d bytes", ErrPairProtocol, pairMaxAnswer)
	}
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(raw, out); err != nil {
			return fmt.Errorf("%w: answer to %s: %v", ErrPairProtocol, path, err)
		}
		return nil
	}
	var we pairWireError
	json.Unmarshal(raw, &we)
	for _, c := range pairWireCodes {
		if c.code == we.Code && c.status == resp.StatusCode {
			if we.Error == "" || we.Error == c.err.Error() {
				return c.err
			}
			return fmt.Errorf("%w: the inviter says: %s", c.err, cardClip(strings.TrimPrefix(we.Error, c.err.Error()+": ")))
		}
	}
	err = fmt.Errorf("%w: %s %s: %d %s", ErrPeerStatus, method, path, resp.StatusCode, cardClip(we.Error))
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return fmt.Errorf("%w (the host at %s answers no pairing route)", ErrNoPairing, dial)
	case resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests:
		return &pairTransientError{err}
	}
	return err
}

// pairSendConfirm sends the joiner's answer once.
func (h *Host) pairSendConfirm(ctx context.Context, s *pairSession, accept bool) (pairConfirmAnswer, error) {
	mac, err := pairConfirmMAC(s.key, "confirm-b", s.transcript, accept)
	if err != nil {
		return pairConfirmAnswer{}, err
	}
	req := pairConfirmRequest{V: 1, ANonce: s.a.Nonce, BNonce: s.b.Nonce, Accept: accept, MAC: mac}
	var ans pairConfirmAnswer
	err = h.pairCall(ctx, "POST", s.remote, pathPairConfirm, req, &ans)
	return ans, err
}

// pairSendDecline tells the inviter that the joiner declines (best effort: a failure is only
// logged; the inviter's session expires without a pin either way).
func (h *Host) pairSendDecline(ctx context.Context, s *pairSession) {
	if s.transcript == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if _, err := h.pairSendConfirm(ctx, s, false); err != nil && !errors.Is(err, ErrPairDeclined) {
		h.log.Warn("pairing: telling the inviter of the decline", "inviter", s.remote, "err", err)
	}
}
