package host

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/mbx"
)

// LAN pairing.
//
// Two hosts on one network pin each other with a one-time token and a 6-digit code. The
// inviting host (`agentmbx pair`) makes a token and waits; the joining host (`agentmbx join ADDR
// TOKEN`) talks to the inviter's LAN server under /v2/pair/. Both derive a key from the token
// (mbx.PairTokenKey: scrypt; the inviter keeps only this key, never the token), prove knowledge
// of it with MACs over the join transcript (mbx.JoinTranscript, mbx.PairMAC), exchange signed
// enc-key ads (so each enc key is vouched for by a host key, itself vouched for by the MACs), and
// show the code mbx.PairingCode(a, b). A side pins the other only when its own user confirmed
// the code and the other side's confirmation arrived, MAC'ed with the token key: the inviter
// waits for the joiner's confirmation, the joiner waits for the inviter's answer.
//
// The exchange, with a the inviter and b the joiner (K = PairTokenKey(token), T = the join
// transcript of a and b, every message JSON):
//
//	b → a  GET  /v2/pair/hello
//	a → b  200 {v:1, proto, host, host_pubkey, owner_pubkey:null, nonce:nA, expires_at}
//	b → a  POST /v2/pair/join {v:1, a_nonce:nA, b:{host, host_pubkey, owner_pubkey:null, nonce:nB,
//	       addr}, mac_join: PairMAC(K, "join", T), enc_ad:{ad: b's v2 enc-key ad, sig}}
//	a → b  200 {mac_accept: PairMAC(K, "accept", T), enc_ad:{ad: a's v2 enc-key ad, sig}}
//	       (both show PairingCode(a, b); each user compares and confirms or declines)
//	b → a  POST /v2/pair/confirm {v:1, a_nonce, b_nonce, accept, mac: ConfirmMAC(K, "confirm-b", T, accept)}
//	a → b  200 {state:"waiting"}   (a's user has not decided within 20 s; b sends it again)
//	     | 200 {state:"done", accept:true, mac: ConfirmMAC(K, "confirm-a", T, true)}     (a pinned b)
//	     | 200 {state:"declined", accept:false, mac: ConfirmMAC(K, "confirm-a", T, false)}
//
// ConfirmMAC (this implementation's addition; 0.5.x had no confirmation message) is base64url
// without padding of HMAC-SHA256 keyed by HKDF-SHA256(ikm = K's bytes, salt
// "agentmbx-pair-token-v1", info "mac:" + label) over label + "\n" + T + "\n" + ("accept" or
// "decline"). Errors are answered as {error, code} with code one of no_pairing (404), expired,
// burned, declined, cancelled (410), bad_token (403), state, conflict (409), bad_request (400).
//
// The token is 12 Crockford base32 characters (60 bits) printed as XXXX-XXXX-XXXX and valid for
// DefaultPairTTL. The inviter answers one join per token; MaxPairAttempts wrong MACs burn it; a
// join for another session's nonce is refused, so a replayed join pins nothing. After a join,
// both users have PairConfirmWindow to confirm. One session (of either role) at a time per host.
const (
	// DefaultPairTTL is how long a pairing token is valid when StartPairing is given 0.
	DefaultPairTTL = 10 * time.Minute
	// MaxPairTTL is the longest token validity StartPairing accepts.
	MaxPairTTL = 24 * time.Hour
	// PairConfirmWindow is how long both users have to confirm the code after the join.
	PairConfirmWindow = 10 * time.Minute
	// MaxPairAttempts is how many wrong MACs burn a token.
	MaxPairAttempts = 5

	pairLongPoll   = 20 * time.Second // the inviter holds a confirm request this long
	pairRetryPause = time.Second      // the joiner's pause before it asks again
	pairNonceBytes = 16
	crockford      = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
)

// The pairing session's types are the api package's.
type (
	PairState    = api.PairState
	PairRole     = api.PairRole
	PairingState = api.PairingState
)

// Pairing states and roles (see api).
const (
	PairNone      = api.PairNone
	PairWaiting   = api.PairWaiting
	PairJoining   = api.PairJoining
	PairCode      = api.PairCode
	PairConfirmed = api.PairConfirmed
	PairDone      = api.PairDone
	PairDeclined  = api.PairDeclined
	PairExpired   = api.PairExpired
	PairFailed    = api.PairFailed
	PairInviter   = api.PairInviter
	PairJoiner    = api.PairJoiner
)

type pairDecision int

const (
	undecided pairDecision = iota
	accepted
	declined
)

// pairSession is one pairing, on either side. The fields a, b, bAddr, key, transcript, code,
// peer and remote are set before the session reaches PairCode and never change after, so a
// goroutine that saw that state under the lock may read them without it.
type pairSession struct {
	role     PairRole
	state    PairState
	err      error
	key      string // hex token key (scrypt of the token); never the token itself
	expires  time.Time
	attempts int

	a, b       mbx.PairParty
	bAddr      string // the addr the joiner sent (part of the transcript)
	transcript []byte
	code       string
	peer       PeerRecord // the other host, as it will be pinned
	remote     string     // joiner: the inviter's LAN address

	mine, theirs pairDecision
}

// pairer holds a host's pairing session. Every field is guarded by mu; changed is closed (and
// replaced) at every change of the session, waking WaitPairing, ConfirmPairing and held confirm
// requests.
type pairer struct {
	mu      sync.Mutex
	s       *pairSession
	changed chan struct{}
	routes  sync.Once
}

func (h *Host) pairer() *pairer { return &h.pair }

func (p *pairer) notifyLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// finishLocked ends s in a final state.
func (p *pairer) finishLocked(s *pairSession, state PairState, err error) {
	if s.state.Final() {
		return
	}
	s.state, s.err = state, err
	p.notifyLocked()
}

// expireLocked ends s when its deadline passed.
func (p *pairer) expireLocked(s *pairSession, now time.Time) {
	if s == nil || s.state.Final() || now.Before(s.expires) {
		return
	}
	var err error = ErrPairExpired
	if s.state != PairWaiting && s.state != PairJoining {
		err = fmt.Errorf("%w (the confirmation window closed)", ErrPairExpired)
	}
	p.finishLocked(s, PairExpired, err)
}

// openLocked reports whether a session is open (so a new one must wait).
func (p *pairer) openLocked(now time.Time) bool {
	p.expireLocked(p.s, now)
	return p.s != nil && !p.s.state.Final()
}

func (s *pairSession) snapshot() PairingState {
	st := PairingState{State: s.state, Role: s.role}
	if !s.expires.IsZero() {
		st.ExpiresAt = mbx.ISOTime(s.expires)
	}
	if s.code != "" && (s.state == PairCode || s.state == PairConfirmed || s.state == PairDone) {
		st.Code = s.code
	}
	if s.peer.Host != "" {
		pe := s.peer.API()
		st.Peer = &pe
	}
	if s.role == PairInviter && s.state == PairWaiting {
		st.AttemptsLeft = MaxPairAttempts - s.attempts
	}
	if s.err != nil {
		st.Error = s.err.Error()
		_, st.Reason = pairWireCode(s.err)
	}
	return st
}

// StartPairing opens a pairing session as the inviter and returns its one-time token
// (XXXX-XXXX-XXXX), valid for ttl (DefaultPairTTL when 0, at most MaxPairTTL). Only a key
// derived from the token is kept. The token is for the user to pass on: it is not logged, and
// not shown again. While a session of either role is open it fails with ErrPairBusy.
//
// The inviter's LAN server must run for the joiner to reach it: the daemon's, or, when no
// daemon runs, a listener the caller serves LANMux on for the session's lifetime.
func (h *Host) StartPairing(ttl time.Duration) (string, error) {
	if ttl == 0 {
		ttl = DefaultPairTTL
	}
	if ttl < 0 || ttl > MaxPairTTL {
		return "", fmt.Errorf("host: start pairing: %w: token lifetime %s (at most %s)", ErrInvalid, ttl, MaxPairTTL)
	}
	p := h.pairer()
	p.mu.Lock()
	busy := p.openLocked(h.clock())
	p.mu.Unlock()
	if busy {
		return "", fmt.Errorf("host: start pairing: %w", ErrPairBusy)
	}
	h.registerPairRoutes(p)
	token, err := newPairToken(h.rand)
	if err != nil {
		return "", fmt.Errorf("host: start pairing: %w", err)
	}
	key, err := mbx.PairTokenKey(token)
	if err != nil {
		return "", fmt.Errorf("host: start pairing: %w", err)
	}
	nonce, err := newPairNonce(h.rand)
	if err != nil {
		return "", fmt.Errorf("host: start pairing: %w", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := h.clock()
	if p.openLocked(now) {
		return "", fmt.Errorf("host: start pairing: %w", ErrPairBusy)
	}
	p.s = &pairSession{
		role: PairInviter, state: PairWaiting, key: key, expires: now.Add(ttl),
		a: mbx.PairParty{Host: h.name, HostPubkey: h.key.PublicKey(), Nonce: nonce},
	}
	p.notifyLocked()
	h.log.Info("pairing started", "role", "inviter", "expires", mbx.ISOTime(p.s.expires))
	return token, nil
}

// PairingStatus shows the current or last pairing session (State PairNone when there was none).
func (h *Host) PairingStatus() (PairingState, error) {
	p := h.pairer()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.s == nil {
		return PairingState{State: PairNone}, nil
	}
	p.expireLocked(p.s, h.clock())
	return p.s.snapshot(), nil
}

// WaitPairing waits until the session's state is other than from (or the session expires) and
// returns it; with ctx done first it returns the current state and ctx's error. The inviter uses
// it to wait for the join (from PairWaiting) without polling.
func (h *Host) WaitPairing(ctx context.Context, from PairState) (PairingState, error) {
	p := h.pairer()
	for {
		p.mu.Lock()
		st := PairingState{State: PairNone}
		var until time.Duration = -1
		if p.s != nil {
			now := h.clock()
			p.expireLocked(p.s, now)
			st = p.s.snapshot()
			if !p.s.state.Final() {
				until = p.s.expires.Sub(now)
			}
		}
		ch := p.changed
		p.mu.Unlock()
		if st.State != from {
			return st, nil
		}
		if err := waitChange(ctx, ch, until); err != nil {
			return st, err
		}
	}
}

// waitChange waits for ch, ctx or (when until ≥ 0) until has passed; only ctx is an error.
func waitChange(ctx context.Context, ch <-chan struct{}, until time.Duration) error {
	var timeout <-chan time.Time
	if until >= 0 {
		t := time.NewTimer(until + 10*time.Millisecond)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-ch:
	case <-timeout:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// ConfirmPairing gives this side's user's answer to the code and, on accept, waits until the
// other side's answer decides the pairing: it returns the pinned peer when both accepted, and
// ErrPairDeclined when either declined (nothing pinned). The inviter waits for the joiner's MAC'ed
// confirmation; the joiner sends it and waits for the inviter's MAC'ed answer. When ctx ends
// first the session is cancelled (ErrPairCancelled) and nothing is pinned on this side.
// Calling it again with the same answer waits again; with the other answer fails (ErrPairState).
func (h *Host) ConfirmPairing(ctx context.Context, accept bool) (api.Peer, error) {
	p := h.pairer()
	p.mu.Lock()
	s := p.s
	if s == nil {
		p.mu.Unlock()
		return api.Peer{}, fmt.Errorf("host: confirm pairing: %w", ErrNoPairing)
	}
	p.expireLocked(s, h.clock())
	want := declined
	if accept {
		want = accepted
	}
	switch {
	case s.state == PairDone:
		p.mu.Unlock()
		if !accept {
			return api.Peer{}, fmt.Errorf("host: confirm pairing: %w: the peer is pinned already", ErrPairState)
		}
		return s.peer.API(), nil
	case s.state.Final():
		err := s.err
		p.mu.Unlock()
		return api.Peer{}, fmt.Errorf("host: confirm pairing: %w", err)
	case s.state != PairCode && s.state != PairConfirmed:
		p.mu.Unlock()
		return api.Peer{}, fmt.Errorf("host: confirm pairing: %w: no code to confirm yet (%s)", ErrPairState, s.state)
	case s.mine != undecided && s.mine != want:
		p.mu.Unlock()
		return api.Peer{}, fmt.Errorf("host: confirm pairing: %w: answered already", ErrPairState)
	}
	if s.role == PairJoiner {
		if !accept {
			s.mine = declined
			p.finishLocked(s, PairDeclined, fmt.Errorf("%w on this host", ErrPairDeclined))
			p.mu.Unlock()
			h.log.Info("pairing declined", "role", "joiner", "peer", s.peer.Host)
			h.pairSendDecline(ctx, s)
			return api.Peer{}, fmt.Errorf("host: confirm pairing: %w", ErrPairDeclined)
		}
		s.mine = accepted
		s.state = PairConfirmed
		p.notifyLocked()
		p.mu.Unlock()
		return h.joinerConfirm(ctx, p, s)
	}
	defer p.mu.Unlock()
	if !accept {
		s.mine = declined
		p.finishLocked(s, PairDeclined, fmt.Errorf("%w on this host", ErrPairDeclined))
		h.log.Info("pairing declined", "role", "inviter", "peer", s.peer.Host)
		return api.Peer{}, fmt.Errorf("host: confirm pairing: %w", ErrPairDeclined)
	}
	s.mine = accepted
	if s.theirs == accepted {
		h.completeLocked(p, s)
	} else if s.state == PairCode {
		s.state = PairConfirmed
		p.notifyLocked()
	}
	for !s.state.Final() {
		ch := p.changed
		until := s.expires.Sub(h.clock())
		p.mu.Unlock()
		err := waitChange(ctx, ch, until)
		p.mu.Lock()
		p.expireLocked(s, h.clock())
		if err != nil && !s.state.Final() {
			p.finishLocked(s, PairFailed, fmt.Errorf("%w: %v", ErrPairCancelled, err))
			h.log.Info("pairing cancelled", "role", "inviter", "peer", s.peer.Host)
		}
	}
	if s.state != PairDone {
		return api.Peer{}, fmt.Errorf("host: confirm pairing: %w", s.err)
	}
	return s.peer.API(), nil
}

// completeLocked pins the peer of a session both users accepted.
func (h *Host) completeLocked(p *pairer, s *pairSession) {
	if err := h.PinPeer(s.peer); err != nil {
		if errors.Is(err, ErrPeerKeyMismatch) || errors.Is(err, ErrPeerKeyInUse) || errors.Is(err, ErrSelf) {
			err = fmt.Errorf("%w: %w", ErrPairConflict, err)
		}
		h.log.Warn("pairing: pin failed", "role", s.role.String(), "peer", s.peer.Host, "err", err)
		p.finishLocked(s, PairFailed, err)
		return
	}
	h.log.Info("pairing done", "role", s.role.String(), "peer", s.peer.Host, "fingerprint", mbx.Fingerprint(s.peer.HostPubkey))
	p.finishLocked(s, PairDone, nil)
}

// CancelPairing ends the open pairing session without pinning. A joiner that has the code tells
// the inviter it declines (best effort, bounded by ctx). It is not an error when the session is
// over already.
func (h *Host) CancelPairing(ctx context.Context) error {
	p := h.pairer()
	p.mu.Lock()
	s := p.s
	if s == nil {
		p.mu.Unlock()
		return fmt.Errorf("host: cancel pairing: %w", ErrNoPairing)
	}
	if s.state.Final() {
		p.mu.Unlock()
		return nil
	}
	tell := s.role == PairJoiner && (s.state == PairCode || s.state == PairConfirmed)
	p.finishLocked(s, PairFailed, ErrPairCancelled)
	p.mu.Unlock()
	h.log.Info("pairing cancelled", "role", s.role.String())
	if tell {
		h.pairSendDecline(ctx, s)
	}
	return nil
}

// JoinPairing is the first half of a join: it asks the inviter at addr (host or host:port,
// default port 7373) for its hello, proves the token with the join MAC, checks the inviter's
// accept MAC and its enc-key ad, and returns the session with the code to show. ConfirmPairing
// then gives the user's answer. Nothing is pinned until then. A malformed or wrong token fails
// with ErrPairToken, a session there that expired with ErrPairExpired, none with ErrNoPairing.
func (h *Host) JoinPairing(ctx context.Context, addr, token string) (PairingState, error) {
	dial, err := normalizeDialAddr(addr)
	if err != nil {
		return PairingState{}, fmt.Errorf("host: join: %w: %v", ErrInvalid, err)
	}
	tok, err := mbx.NormalizePairToken(token)
	if err != nil {
		return PairingState{}, fmt.Errorf("host: join: %w (want XXXX-XXXX-XXXX)", ErrPairToken)
	}
	p := h.pairer()
	p.mu.Lock()
	now := h.clock()
	if p.openLocked(now) {
		p.mu.Unlock()
		return PairingState{}, fmt.Errorf("host: join: %w", ErrPairBusy)
	}
	s := &pairSession{role: PairJoiner, state: PairJoining, remote: dial, expires: now.Add(PairConfirmWindow)}
	p.s = s
	p.notifyLocked()
	p.mu.Unlock()

	fail := func(err error) (PairingState, error) {
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			err = fmt.Errorf("%w: %w", ErrPairCancelled, err)
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		state := PairFailed
		if errors.Is(err, ErrPairExpired) {
			state = PairExpired
		}
		p.finishLocked(s, state, err)
		h.log.Info("pairing: join failed", "inviter", dial, "err", err)
		return s.snapshot(), fmt.Errorf("host: join %s: %w", dial, err)
	}
	var hello pairHello
	if err := h.pairCall(ctx, "GET", dial, pathPairHello, nil, &hello); err != nil {
		return fail(err)
	}
	a, err := hello.party()
	if err != nil {
		return fail(err)
	}
	if err := h.pairConflict(a.Host, a.HostPubkey); err != nil {
		return fail(err)
	}
	key, err := mbx.PairTokenKey(tok)
	if err != nil {
		return fail(fmt.Errorf("%w: %v", ErrPairToken, err))
	}
	nonce, err := newPairNonce(h.rand)
	if err != nil {
		return fail(err)
	}
	b := mbx.PairParty{Host: h.name, HostPubkey: h.key.PublicKey(), Nonce: nonce}
	adv := h.pairAdvertiseAddr()
	transcript, err := mbx.JoinTranscript(a, b, adv)
	if err != nil {
		return fail(err)
	}
	macJoin, err := mbx.PairMAC(key, mbx.PairMACJoin, transcript)
	if err != nil {
		return fail(err)
	}
	myAd, err := h.pairEncAd()
	if err != nil {
		return fail(err)
	}
	req := pairJoinRequest{V: 1, ANonce: a.Nonce, B: wireParty(b, &adv), MACJoin: macJoin, EncAd: myAd}
	var ans pairJoinAnswer
	if err := h.pairCall(ctx, "POST", dial, pathPairJoin, req, &ans); err != nil {
		return fail(err)
	}
	macAccept, err := mbx.PairMAC(key, mbx.PairMACAccept, transcript)
	if err != nil {
		return fail(err)
	}
	if !mbx.PairMACEqual(macAccept, ans.MACAccept) {
		return fail(fmt.Errorf("%w: the inviter's accept MAC does not verify (it does not hold this token)", ErrPairToken))
	}
	ad, err := mbx.CheckEncAd(ans.EncAd.Ad, ans.EncAd.Sig, mbx.EncAdPeer{Host: a.Host, HostPubkey: a.HostPubkey}, h.clock())
	if err != nil {
		return fail(fmt.Errorf("%w: the inviter's enc-key ad: %w", ErrPairProtocol, err))
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if s.state.Final() { // cancelled meanwhile
		return s.snapshot(), fmt.Errorf("host: join %s: %w", dial, s.err)
	}
	s.a, s.b, s.bAddr, s.key, s.transcript = a, b, adv, key, transcript
	s.code = mbx.PairingCode(a, b)
	s.peer = PeerRecord{Host: a.Host, HostPubkey: a.HostPubkey, EncPub: ad.EncPub, Addr: dial}
	s.state = PairCode
	s.expires = h.clock().Add(PairConfirmWindow)
	p.notifyLocked()
	h.log.Info("pairing: joined", "role", "joiner", "peer", a.Host, "fingerprint", mbx.Fingerprint(a.HostPubkey))
	return s.snapshot(), nil
}

// Join pairs this host with the inviter at addr using token: JoinPairing, then confirm (the
// user's comparison of the code, shown with the inviter's name and fingerprint), then
// ConfirmPairing with its answer. It returns the pinned peer, or an error and pins nothing.
func Join(ctx context.Context, h *Host, addr, token string, confirm func(code string, peer api.Peer) bool) (api.Peer, error) {
	st, err := h.JoinPairing(ctx, addr, token)
	if err != nil {
		return api.Peer{}, err
	}
	return h.ConfirmPairing(ctx, confirm(st.Code, *st.Peer))
}

// Invite runs the inviter's side in one call, for a command that drives it itself:
// StartPairing, show(token) for the user to pass on, a wait for the join, confirm(code, peer) for
// the user's comparison of the code, then ConfirmPairing with the answer. The caller keeps the
// LAN server running meanwhile (the daemon's, or LANMux served on a listener of its own). When
// ctx ends first the session is cancelled and nothing is pinned.
func Invite(ctx context.Context, h *Host, ttl time.Duration, show func(token string), confirm func(code string, peer api.Peer) bool) (api.Peer, error) {
	token, err := h.StartPairing(ttl)
	if err != nil {
		return api.Peer{}, err
	}
	show(token)
	st, err := h.WaitPairing(ctx, PairWaiting)
	if err != nil {
		h.CancelPairing(ctx)
		return api.Peer{}, fmt.Errorf("host: invite: %w: %w", ErrPairCancelled, err)
	}
	if st.State != PairCode {
		if err := st.Err(); err != nil {
			return api.Peer{}, fmt.Errorf("host: invite: %w", err)
		}
		return api.Peer{}, fmt.Errorf("host: invite: %w: %s", ErrPairState, st.State)
	}
	return h.ConfirmPairing(ctx, confirm(st.Code, *st.Peer))
}

// joinerConfirm sends the joiner's accept to the inviter until the inviter answers for good,
// then pins the inviter when it accepted too.
func (h *Host) joinerConfirm(ctx context.Context, p *pairer, s *pairSession) (api.Peer, error) {
	end := func(state PairState, err error) (api.Peer, error) {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.finishLocked(s, state, err)
		if s.state == PairDone {
			return s.peer.API(), nil
		}
		return api.Peer{}, fmt.Errorf("host: confirm pairing: %w", s.err)
	}
	for {
		p.mu.Lock()
		p.expireLocked(s, h.clock())
		final := s.state.Final()
		p.mu.Unlock()
		if final { // expired or cancelled
			return end(PairFailed, nil)
		}
		ans, err := h.pairSendConfirm(ctx, s, true)
		if err != nil {
			var te *pairTransientError
			if ctx.Err() == nil && errors.As(err, &te) {
				h.log.Warn("pairing: inviter unreachable, retrying", "inviter", s.remote, "err", err)
				if werr := pairPause(ctx); werr == nil {
					continue
				}
			}
			if ctx.Err() != nil {
				h.pairSendDecline(ctx, s)
				return end(PairFailed, fmt.Errorf("%w: %v", ErrPairCancelled, ctx.Err()))
			}
			state := PairFailed
			switch {
			case errors.Is(err, ErrPairDeclined):
				state = PairDeclined
			case errors.Is(err, ErrPairExpired):
				state = PairExpired
			}
			return end(state, err)
		}
		switch ans.State {
		case "waiting":
			if err := pairPause(ctx); err != nil {
				h.pairSendDecline(ctx, s)
				return end(PairFailed, fmt.Errorf("%w: %v", ErrPairCancelled, err))
			}
		case "done", "declined":
			ok := ans.State == "done"
			want, err := pairConfirmMAC(s.key, "confirm-a", s.transcript, ok)
			if err != nil || ans.Accept != ok || !mbx.PairMACEqual(want, ans.MAC) {
				return end(PairFailed, fmt.Errorf("%w: the inviter's answer does not verify", ErrPairProtocol))
			}
			if !ok {
				h.log.Info("pairing declined by the inviter", "peer", s.peer.Host)
				return end(PairDeclined, fmt.Errorf("%w by the inviting host", ErrPairDeclined))
			}
			p.mu.Lock()
			if !s.state.Final() {
				h.completeLocked(p, s)
			}
			p.mu.Unlock()
			return end(PairFailed, nil)
		default:
			return end(PairFailed, fmt.Errorf("%w: unknown confirm state %q", ErrPairProtocol, cardClip(ans.State)))
		}
	}
}

func pairPause(ctx context.Context) error {
	t := time.NewTimer(pairRetryPause)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// pairConflict refuses a peer that is this host, or a name or key pinned with another key or
// name.
func (h *Host) pairConflict(host, key string) error {
	if host == h.name || key == h.key.PublicKey() {
		return fmt.Errorf("%w: the other host has this host's name or key (%s)", ErrPairConflict, host)
	}
	if rec, err := h.Peer(host); err == nil && rec.HostPubkey != key {
		return fmt.Errorf("%w: %s is pinned with key %s, the other host has %s", ErrPairConflict, host,
			mbx.Fingerprint(rec.HostPubkey), mbx.Fingerprint(key))
	} else if err != nil && !errors.Is(err, ErrUnpaired) {
		return err
	}
	if rec, err := h.PeerByKey(key); err == nil && rec.Host != host {
		return fmt.Errorf("%w: key %s is pinned as %s, the other host calls itself %s", ErrPairConflict,
			mbx.Fingerprint(key), rec.Host, host)
	} else if err != nil && !errors.Is(err, ErrUnpaired) {
		return err
	}
	return nil
}

// pairEncAd is this host's signed v2 enc-key ad for the exchange.
func (h *Host) pairEncAd() (mbx.EncAdPublish, error) {
	ad, sig, err := mbx.SignEncAdV2(h.name, h.key, h.enc.PublicKey(), h.clock(), 0)
	if err != nil {
		return mbx.EncAdPublish{}, err
	}
	return ad.Publish(sig)
}

// pairAdvertiseAddr is the LAN address the joiner asks the inviter to use: the daemon's bound
// port when it runs, else the configured listen address, else the default port. An empty or
// unspecified host part is filled in by the inviter with the address the join came from.
func (h *Host) pairAdvertiseAddr() string {
	port, listen := h.lanPortHint(), h.ListenAddr()
	host, lport := "", fmt.Sprint(DefaultPort)
	if listen != "" {
		if hh, pp, err := net.SplitHostPort(listen); err == nil {
			host, lport = hh, pp
		}
	}
	if port > 0 {
		lport = fmt.Sprint(port)
	}
	return net.JoinHostPort(host, lport)
}

// newPairToken makes a token of 12 Crockford base32 characters (60 bits), grouped by four.
func newPairToken(r io.Reader) (string, error) {
	var raw [12]byte
	if _, err := io.ReadFull(r, raw[:]); err != nil {
		return "", fmt.Errorf("pairing token: %w", err)
	}
	var b strings.Builder
	for i, c := range raw {
		if i > 0 && i%4 == 0 {
			b.WriteByte('-')
		}
		b.WriteByte(crockford[c&31])
	}
	return b.String(), nil
}

func newPairNonce(r io.Reader) (string, error) {
	raw := make([]byte, pairNonceBytes)
	if _, err := io.ReadFull(r, raw); err != nil {
		return "", fmt.Errorf("pairing nonce: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(raw), nil
}

// normalizeDialAddr reads the inviter's address as a user types it: host, host:port, [v6]:port,
// a bare IPv6 address, optionally with http://; the port defaults to DefaultPort.
func normalizeDialAddr(s string) (string, error) {
	s = strings.TrimSpace(s)
	s = strings.TrimPrefix(s, "http://")
	s = strings.TrimSuffix(s, "/")
	if s == "" {
		return "", errors.New("empty address")
	}
	if _, _, err := net.SplitHostPort(s); err != nil {
		if ip := net.ParseIP(strings.Trim(s, "[]")); ip != nil {
			s = net.JoinHostPort(ip.String(), fmt.Sprint(DefaultPort))
		} else {
			s = net.JoinHostPort(s, fmt.Sprint(DefaultPort))
		}
	}
	if err := checkDialAddr(s); err != nil {
		return "", err
	}
	return s, nil
}
