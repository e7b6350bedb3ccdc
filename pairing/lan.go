package pairing

import (
	"bytes"
	"context"
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

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/internal/logkey"
	"github.com/agentmbx/agentmbx/mbx"
)

// The pairing routes of the LAN server. They carry no LAN hop (the hosts are not paired yet);
// the token MACs authenticate them. The flow is described in the package doc.
const (
	pathPairHello   = "/v2/pair/hello"
	pathPairJoin    = "/v2/pair/join"
	pathPairConfirm = "/v2/pair/confirm"

	pairMaxBody    = 16 << 10
	pairMaxAnswer  = 64 << 10
	pairMaxMACLen  = 100
	pairMaxAddrLen = mbx.MaxDialAddrLen
)

var pairNonceRE = regexp.MustCompile(`^[A-Za-z0-9_-]{16,64}$`)

// pairStatuses are the HTTP statuses of the pairing errors on the LAN wire, by their reason
// (api.PairReason); anything else is answered 500 "internal".
var pairStatuses = map[string]int{
	"no_pairing":  http.StatusNotFound,
	"expired":     http.StatusGone,
	"burned":      http.StatusGone,
	"declined":    http.StatusGone,
	"cancelled":   http.StatusGone,
	"bad_token":   http.StatusForbidden,
	"conflict":    http.StatusConflict,
	"state":       http.StatusConflict,
	"bad_request": http.StatusBadRequest,
}

// pairWireCode is the status and code of err (500 "internal" for anything but a pairing error).
func pairWireCode(err error) (int, string) {
	code := api.PairReason(err)
	if st, ok := pairStatuses[code]; ok {
		return st, code
	}
	return http.StatusInternalServerError, "internal"
}

// errInviterStatus is returned (wrapped) when the inviter answers with an unexpected status.
var errInviterStatus = api.NewError(api.CodeUnavailable, "unexpected status from the inviting host", "")

// clip shortens outside input for an error message.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// pairTransientError marks a failure worth retrying: the inviter was unreachable or answered
// 5xx / 429.
type pairTransientError struct{ err error }

func (e *pairTransientError) Error() string { return e.err.Error() }
func (e *pairTransientError) Unwrap() error { return e.err }

// party checks a party's fields and returns it.
func partyOf(w mbx.PairPartyWire) (mbx.PairParty, error) {
	switch {
	case !mbx.ValidHostName(w.Host):
		return mbx.PairParty{}, fmt.Errorf("%w: host name %q", api.ErrPairProtocol, clip(w.Host))
	case !mbx.ValidPublicKey(w.HostPubkey):
		return mbx.PairParty{}, fmt.Errorf("%w: host_pubkey", api.ErrPairProtocol)
	case w.OwnerPubkey != nil && !mbx.ValidPublicKey(*w.OwnerPubkey):
		return mbx.PairParty{}, fmt.Errorf("%w: owner_pubkey", api.ErrPairProtocol)
	case !pairNonceRE.MatchString(w.Nonce):
		return mbx.PairParty{}, fmt.Errorf("%w: nonce", api.ErrPairProtocol)
	}
	p := mbx.PairParty{Host: w.Host, HostPubkey: w.HostPubkey, Nonce: w.Nonce}
	if w.OwnerPubkey != nil {
		p.OwnerPubkey = *w.OwnerPubkey
	}
	return p, nil
}

func helloParty(hl mbx.PairHello) (mbx.PairParty, error) {
	if hl.V != 1 || hl.Proto != mbx.PairProto {
		return mbx.PairParty{}, fmt.Errorf("%w: hello of another version (v %d, proto %q)", api.ErrPairProtocol, hl.V, clip(hl.Proto))
	}
	return partyOf(mbx.PairPartyWire{Host: hl.Host, HostPubkey: hl.HostPubkey, OwnerPubkey: hl.OwnerPubkey, Nonce: hl.Nonce})
}

// checkAdvertisedAddr checks the joiner's addr: empty, or host:port with a port from 1 to 65535
// (the host may be empty or unspecified: the inviter fills it in).
func checkAdvertisedAddr(s string) error {
	if s == "" {
		return nil
	}
	if len(s) > pairMaxAddrLen {
		return fmt.Errorf("%w: addr too long", api.ErrPairProtocol)
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil || strings.ContainsFunc(host, func(r rune) bool { return r <= ' ' || r == 0x7f || r == '/' }) {
		return fmt.Errorf("%w: addr %q", api.ErrPairProtocol, clip(s))
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 || port != strconv.Itoa(n) {
		return fmt.Errorf("%w: addr %q: bad port", api.ErrPairProtocol, clip(s))
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

// registerRoutes puts the pairing routes on the host's LAN mux (once).
func (h *Service) registerRoutes() {
	h.routes.Do(func() {
		h.cfg.Mux.HandleFunc("GET "+pathPairHello, h.serveHello)
		h.cfg.Mux.HandleFunc("POST "+pathPairJoin, h.serveJoin)
		h.cfg.Mux.HandleFunc("POST "+pathPairConfirm, h.serveConfirm)
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
	pairWriteJSON(w, status, mbx.PairWireError{Error: msg, Code: code, AttemptsLeft: attemptsLeft})
}

// pairDecode reads a pairing request body strictly (known fields only, one value, capped).
func pairDecode(w http.ResponseWriter, r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, pairMaxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: %v", api.ErrPairProtocol, err)
	}
	if dec.More() {
		return fmt.Errorf("%w: data after the request", api.ErrPairProtocol)
	}
	return nil
}

// inviterLocked returns the open inviter session (expired ones are ended first), or the error
// that explains why there is none.
func (h *Service) inviterLocked(now time.Time) (*pairSession, error) {
	s := h.s
	if s == nil || s.role != api.PairInviter {
		return nil, api.ErrNoPairing
	}
	h.expireLocked(s, now)
	return s, nil
}

// badMACLocked counts a wrong MAC and burns the token at MaxAttempts.
func (h *Service) badMACLocked(s *pairSession, r *http.Request, step string) (*int, error) {
	s.attempts++
	left := MaxAttempts - s.attempts
	h.cfg.Logger.Warn("pairing: wrong token MAC", logkey.Step, step, logkey.From, r.RemoteAddr, logkey.AttemptsLeft, max(left, 0))
	if left <= 0 {
		h.finishLocked(s, api.PairFailed, api.ErrPairBurned)
		h.cfg.Logger.Warn("pairing: token burned", logkey.Attempts, s.attempts)
		return nil, api.ErrPairBurned
	}
	return &left, fmt.Errorf("%w (%d attempts left)", api.ErrPairToken, left)
}

func (h *Service) serveHello(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s, err := h.inviterLocked(h.cfg.Clock())
	if err == nil && s.state != api.PairWaiting {
		err = s.err
		if err == nil {
			err = fmt.Errorf("%w: the token has been used", api.ErrPairState)
		}
	}
	if err != nil {
		pairWriteErr(w, err, nil)
		return
	}
	pairWriteJSON(w, http.StatusOK, mbx.PairHello{V: 1, Proto: mbx.PairProto, Host: s.a.Host, HostPubkey: s.a.HostPubkey,
		Nonce: s.a.Nonce, ExpiresAt: mbx.ISOTime(s.expires)})
}

func (h *Service) serveJoin(w http.ResponseWriter, r *http.Request) {
	var req mbx.PairJoinRequest
	if err := pairDecode(w, r, &req); err != nil {
		pairWriteErr(w, err, nil)
		return
	}
	b, err := partyOf(req.B)
	if err == nil && (req.V != 1 || req.B.Addr == nil || req.MACJoin == "" || len(req.MACJoin) > pairMaxMACLen) {
		err = fmt.Errorf("%w: join needs v 1, b.addr and mac_join", api.ErrPairProtocol)
	}
	if err == nil {
		err = checkAdvertisedAddr(*req.B.Addr)
	}
	if err != nil {
		pairWriteErr(w, err, nil)
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.cfg.Clock()
	s, err := h.inviterLocked(now)
	switch {
	case err != nil:
	case s.state.Final():
		err = s.err
		if err == nil {
			err = fmt.Errorf("%w: the token has been used", api.ErrPairState)
		}
	case s.state != api.PairWaiting:
		err = fmt.Errorf("%w: the token has been used", api.ErrPairState)
	case req.ANonce != s.a.Nonce:
		err = fmt.Errorf("%w: the join answers another pairing session", api.ErrPairState)
	}
	if err != nil {
		pairWriteErr(w, err, nil)
		return
	}
	transcript, err := mbx.JoinTranscript(s.a, b, *req.B.Addr)
	if err != nil {
		pairWriteErr(w, fmt.Errorf("%w: %v", api.ErrPairProtocol, err), nil)
		return
	}
	want, err := mbx.PairMAC(s.key, mbx.PairMACJoin, transcript)
	if err != nil {
		pairWriteErr(w, err, nil)
		return
	}
	if !mbx.PairMACEqual(want, req.MACJoin) {
		left, err := h.badMACLocked(s, r, "join")
		pairWriteErr(w, err, left)
		return
	}
	ad, err := mbx.CheckEncAd(req.EncAd.Ad, req.EncAd.Sig, mbx.EncAdPeer{Host: b.Host, HostPubkey: b.HostPubkey}, now)
	if err != nil {
		pairWriteErr(w, fmt.Errorf("%w: the joiner's enc-key ad: %w", api.ErrPairProtocol, err), nil)
		return
	}
	if err := h.pairConflict(b.Host, b.HostPubkey); err != nil {
		h.finishLocked(s, api.PairFailed, err)
		h.cfg.Logger.Warn("pairing refused", logkey.Peer, b.Host, logkey.Err, err)
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
	s.peer = api.Peer{Host: b.Host, HostPubkey: b.HostPubkey, Fingerprint: mbx.Fingerprint(b.HostPubkey), EncPub: ad.EncPub,
		Addr: resolvePeerAddr(s.bAddr, r.RemoteAddr)}
	s.state = api.PairCode
	s.expires = now.Add(ConfirmWindow)
	h.notifyLocked()
	h.cfg.Logger.Info("pairing: joined", logkey.Role, "inviter", logkey.Peer, b.Host, logkey.Fingerprint, mbx.Fingerprint(b.HostPubkey), logkey.Addr, s.peer.Addr)
	pairWriteJSON(w, http.StatusOK, mbx.PairJoinAnswer{MACAccept: accept, EncAd: myAd})
}

func (h *Service) serveConfirm(w http.ResponseWriter, r *http.Request) {
	var req mbx.PairConfirmRequest
	if err := pairDecode(w, r, &req); err != nil {
		pairWriteErr(w, err, nil)
		return
	}
	if req.V != 1 || req.MAC == "" || len(req.MAC) > pairMaxMACLen {
		pairWriteErr(w, fmt.Errorf("%w: confirm needs v 1 and mac", api.ErrPairProtocol), nil)
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	s, err := h.inviterLocked(h.cfg.Clock())
	switch {
	case err != nil:
	case s.transcript == nil:
		err = s.err
		if err == nil {
			err = fmt.Errorf("%w: no join yet", api.ErrPairState)
		}
	case req.ANonce != s.a.Nonce || req.BNonce != s.b.Nonce:
		err = fmt.Errorf("%w: the confirmation answers another pairing session", api.ErrPairState)
	}
	if err != nil {
		pairWriteErr(w, err, nil)
		return
	}
	want, err := mbx.PairConfirmMAC(s.key, mbx.PairMACConfirmJoiner, s.transcript, req.Accept)
	if err != nil {
		pairWriteErr(w, err, nil)
		return
	}
	if !mbx.PairMACEqual(want, req.MAC) {
		if s.state.Final() {
			pairWriteErr(w, fmt.Errorf("%w: confirmation MAC", api.ErrPairToken), nil)
			return
		}
		left, err := h.badMACLocked(s, r, "confirm")
		pairWriteErr(w, err, left)
		return
	}
	if !s.state.Final() {
		switch {
		case !req.Accept:
			s.theirs = declined
			h.cfg.Logger.Info("pairing declined by the joiner", logkey.Peer, s.peer.Host)
			h.finishLocked(s, api.PairDeclined, fmt.Errorf("%w by the joining host", api.ErrPairDeclined))
		case s.theirs == declined:
			pairWriteErr(w, fmt.Errorf("%w: the joiner declined already", api.ErrPairState), nil)
			return
		default:
			if s.theirs != accepted {
				s.theirs = accepted
				h.notifyLocked()
			}
			if s.mine == accepted {
				h.completeLocked(s)
			}
		}
	}
	// Hold the request until this side's user decides, for at most pairLongPoll.
	hold := time.NewTimer(pairLongPoll)
	defer hold.Stop()
	for !s.state.Final() {
		ch := h.changed
		until := s.expires.Sub(h.cfg.Clock())
		h.mu.Unlock()
		var done bool
		select {
		case <-ch:
		case <-hold.C:
			done = true
		case <-r.Context().Done():
			done = true
		case <-time.After(until + 10*time.Millisecond):
		}
		h.mu.Lock()
		h.expireLocked(s, h.cfg.Clock())
		if done {
			break
		}
	}
	switch s.state {
	case api.PairDone, api.PairDeclined:
		ok := s.state == api.PairDone
		mac, err := mbx.PairConfirmMAC(s.key, mbx.PairMACConfirmInviter, s.transcript, ok)
		if err != nil {
			pairWriteErr(w, err, nil)
			return
		}
		state := "declined"
		if ok {
			state = "done"
		}
		pairWriteJSON(w, http.StatusOK, mbx.PairConfirmAnswer{State: state, Accept: ok, MAC: mac})
	case api.PairCode, api.PairConfirmed:
		pairWriteJSON(w, http.StatusOK, mbx.PairConfirmAnswer{State: "waiting"})
	default:
		pairWriteErr(w, s.err, nil)
	}
}

// pairCall makes one pairing request to the inviter at dial and decodes a 200 answer into out;
// an error answer becomes the matching pairing error.
func (h *Service) pairCall(ctx context.Context, method, dial, path string, in, out any) error {
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
		return fmt.Errorf("%w: %v", api.ErrBadRequest, err)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := h.cfg.HTTPClient.Do(req)
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
		return fmt.Errorf("%w: answer larger than %d bytes", api.ErrPairProtocol, pairMaxAnswer)
	}
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(raw, out); err != nil {
			return fmt.Errorf("%w: answer to %s: %v", api.ErrPairProtocol, path, err)
		}
		return nil
	}
	var we mbx.PairWireError
	json.Unmarshal(raw, &we)
	if perr := api.PairReasonErr(we.Code); perr != nil && pairStatuses[we.Code] == resp.StatusCode {
		if we.Error == "" || we.Error == perr.Error() {
			return perr
		}
		return fmt.Errorf("%w: the inviter says: %s", perr, clip(strings.TrimPrefix(we.Error, perr.Error()+": ")))
	}
	err = fmt.Errorf("%w: %s %s: %d %s", errInviterStatus, method, path, resp.StatusCode, clip(we.Error))
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return fmt.Errorf("%w (the host at %s answers no pairing route)", api.ErrNoPairing, dial)
	case resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests:
		return &pairTransientError{err}
	}
	return err
}

// pairSendConfirm sends the joiner's answer once.
func (h *Service) pairSendConfirm(ctx context.Context, s *pairSession, accept bool) (mbx.PairConfirmAnswer, error) {
	mac, err := mbx.PairConfirmMAC(s.key, mbx.PairMACConfirmJoiner, s.transcript, accept)
	if err != nil {
		return mbx.PairConfirmAnswer{}, err
	}
	req := mbx.PairConfirmRequest{V: 1, ANonce: s.a.Nonce, BNonce: s.b.Nonce, Accept: accept, MAC: mac}
	var ans mbx.PairConfirmAnswer
	err = h.pairCall(ctx, "POST", s.remote, pathPairConfirm, req, &ans)
	return ans, err
}

// pairSendDecline tells the inviter that the joiner declines (best effort: a failure is only
// logged; the inviter's session expires without a pin either way).
func (h *Service) pairSendDecline(ctx context.Context, s *pairSession) {
	if s.transcript == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if _, err := h.pairSendConfirm(ctx, s, false); err != nil && !errors.Is(err, api.ErrPairDeclined) {
		h.cfg.Logger.Warn("pairing: telling the inviter of the decline", logkey.Inviter, s.remote, logkey.Err, err)
	}
}
