package pairing

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/internal/logkey"
	"github.com/agentmbx/agentmbx/mbx"
)

const (
	// DefaultTTL is how long a pairing token is valid when StartPairing is given 0.
	DefaultTTL = 10 * time.Minute
	// MaxTTL is the longest token validity StartPairing accepts.
	MaxTTL = 24 * time.Hour
	// ConfirmWindow is how long both users have to confirm the code after the join.
	ConfirmWindow = 10 * time.Minute
	// MaxAttempts is how many wrong MACs burn a token.
	MaxAttempts = 5

	pairLongPoll   = 20 * time.Second // the inviter holds a confirm request this long
	pairRetryPause = time.Second      // the joiner's pause before it asks again
	pairNonceBytes = 16
	crockford      = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
)

type pairDecision int

const (
	undecided pairDecision = iota
	accepted
	declined
)

// pairSession is one pairing, on either side. The fields a, b, bAddr, key, transcript, code,
// peer and remote are set before the session reaches api.PairCode and never change after, so a
// goroutine that saw that state under the lock may read them without it.
type pairSession struct {
	role     api.PairRole
	state    api.PairState
	err      error
	key      string // hex token key (scrypt of the token); never the token itself
	expires  time.Time
	attempts int

	a, b       mbx.PairParty
	bAddr      string // the addr the joiner sent (part of the transcript)
	transcript []byte
	code       string
	peer       api.Peer // the other host, as it will be pinned
	remote     string   // joiner: the inviter's LAN address

	mine, theirs pairDecision
}

// Identity is the host that pairs: its name, its host key and its enc key.
type Identity interface {
	Name() string
	Key() mbx.SigningKey
	EncKey() mbx.EncKey
}

// Pinner is the host's peer store, as pairing needs it.
type Pinner interface {
	// PinnedKey is the host key pinned under name ("" when none).
	PinnedKey(name string) (string, error)
	// PinnedName is the name key is pinned under ("" when none).
	PinnedName(key string) (string, error)
	// Pin pins the peer both users accepted. An error for a name or key pinned otherwise, or
	// for this host itself, wraps api.ErrPairConflict.
	Pin(p api.Peer) error
}

// Mux is where the pairing routes are registered: the host's LAN server (an *http.ServeMux).
type Mux interface {
	HandleFunc(pattern string, handler func(http.ResponseWriter, *http.Request))
}

// Doer sends the joiner's requests to the inviter (an *http.Client).
type Doer interface {
	Do(req *http.Request) (*http.Response, error)
}

// Config is what a Service needs from its host. Every field but AdvertiseAddr is required.
type Config struct {
	Identity   Identity
	Pins       Pinner
	Mux        Mux
	HTTPClient Doer
	Clock      func() time.Time
	Rand       io.Reader // safe for concurrent use
	Logger     *slog.Logger
	// AdvertiseAddr is the LAN address a joiner asks the inviter to pin it at; an empty or
	// unspecified host part is filled in by the inviter with the address the join came from.
	// nil: ":7373".
	AdvertiseAddr func() string
}

// Service runs one host's pairing sessions, one at a time; it implements api.PairingService.
// Every session field is guarded by mu; changed is closed (and replaced) at every change of the
// session, waking WaitPairing, ConfirmPairing and held confirm requests.
type Service struct {
	cfg     Config
	mu      sync.Mutex
	s       *pairSession
	changed chan struct{}
	routes  sync.Once
}

var _ api.PairingService = (*Service)(nil)

// New returns the pairing service of a host. Its LAN routes are registered on cfg.Mux when the
// first session starts as the inviter.
func New(cfg Config) *Service {
	if cfg.AdvertiseAddr == nil {
		cfg.AdvertiseAddr = func() string { return net.JoinHostPort("", fmt.Sprint(mbx.DefaultHostPort)) }
	}
	return &Service{cfg: cfg, changed: make(chan struct{})}
}

func (h *Service) notifyLocked() {
	close(h.changed)
	h.changed = make(chan struct{})
}

// finishLocked ends s in a final state.
func (h *Service) finishLocked(s *pairSession, state api.PairState, err error) {
	if s.state.Final() {
		return
	}
	s.state, s.err = state, err
	h.notifyLocked()
}

// expireLocked ends s when its deadline passed.
func (h *Service) expireLocked(s *pairSession, now time.Time) {
	if s == nil || s.state.Final() || now.Before(s.expires) {
		return
	}
	var err error = api.ErrPairExpired
	if s.state != api.PairWaiting && s.state != api.PairJoining {
		err = fmt.Errorf("%w (the confirmation window closed)", api.ErrPairExpired)
	}
	h.finishLocked(s, api.PairExpired, err)
}

// openLocked reports whether a session is open (so a new one must wait).
func (h *Service) openLocked(now time.Time) bool {
	h.expireLocked(h.s, now)
	return h.s != nil && !h.s.state.Final()
}

func (s *pairSession) snapshot() api.PairingState {
	st := api.PairingState{State: s.state, Role: s.role}
	if !s.expires.IsZero() {
		st.ExpiresAt = mbx.ISOTime(s.expires)
	}
	if s.code != "" && (s.state == api.PairCode || s.state == api.PairConfirmed || s.state == api.PairDone) {
		st.Code = s.code
	}
	if s.peer.Host != "" {
		pe := s.peer
		st.Peer = &pe
	}
	if s.role == api.PairInviter && s.state == api.PairWaiting {
		st.AttemptsLeft = MaxAttempts - s.attempts
	}
	if s.err != nil {
		st.Error = s.err.Error()
		st.Reason = api.PairReason(s.err)
	}
	return st
}

// StartPairing opens a pairing session as the inviter and returns its one-time token
// (XXXX-XXXX-XXXX), valid for ttl (DefaultTTL when 0, at most MaxTTL). Only a key
// derived from the token is kept. The token is for the user to pass on: it is not logged, and
// not shown again. While a session of either role is open it fails with api.ErrPairBusy.
//
// The inviter's LAN server must run for the joiner to reach it: the daemon's, or, when no
// daemon runs, a listener the caller serves LANMux on for the session's lifetime.
func (h *Service) StartPairing(_ context.Context, ttl time.Duration) (string, error) {
	if ttl == 0 {
		ttl = DefaultTTL
	}
	if ttl < 0 || ttl > MaxTTL {
		return "", fmt.Errorf("pairing: start pairing: %w: token lifetime %s (at most %s)", api.ErrBadRequest, ttl, MaxTTL)
	}
	h.mu.Lock()
	busy := h.openLocked(h.cfg.Clock())
	h.mu.Unlock()
	if busy {
		return "", fmt.Errorf("pairing: start pairing: %w", api.ErrPairBusy)
	}
	h.registerRoutes()
	token, err := newPairToken(h.cfg.Rand)
	if err != nil {
		return "", fmt.Errorf("pairing: start pairing: %w", err)
	}
	key, err := mbx.PairTokenKey(token)
	if err != nil {
		return "", fmt.Errorf("pairing: start pairing: %w", err)
	}
	nonce, err := newPairNonce(h.cfg.Rand)
	if err != nil {
		return "", fmt.Errorf("pairing: start pairing: %w", err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.cfg.Clock()
	if h.openLocked(now) {
		return "", fmt.Errorf("pairing: start pairing: %w", api.ErrPairBusy)
	}
	h.s = &pairSession{
		role: api.PairInviter, state: api.PairWaiting, key: key, expires: now.Add(ttl),
		a: mbx.PairParty{Host: h.cfg.Identity.Name(), HostPubkey: h.cfg.Identity.Key().PublicKey(), Nonce: nonce},
	}
	h.notifyLocked()
	h.cfg.Logger.Info("pairing started", logkey.Role, "inviter", logkey.Expires, mbx.ISOTime(h.s.expires))
	return token, nil
}

// PairingStatus shows the current or last pairing session (State api.PairNone when there was none).
func (h *Service) PairingStatus(context.Context) (api.PairingState, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.s == nil {
		return api.PairingState{State: api.PairNone}, nil
	}
	h.expireLocked(h.s, h.cfg.Clock())
	return h.s.snapshot(), nil
}

// WaitPairing waits until the session's state is other than from (or the session expires) and
// returns it; with ctx done first it returns the current state and ctx's error. The inviter uses
// it to wait for the join (from api.PairWaiting) without polling.
func (h *Service) WaitPairing(ctx context.Context, from api.PairState) (api.PairingState, error) {
	for {
		h.mu.Lock()
		st := api.PairingState{State: api.PairNone}
		var until time.Duration = -1
		if h.s != nil {
			now := h.cfg.Clock()
			h.expireLocked(h.s, now)
			st = h.s.snapshot()
			if !h.s.state.Final() {
				until = h.s.expires.Sub(now)
			}
		}
		ch := h.changed
		h.mu.Unlock()
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
// api.ErrPairDeclined when either declined (nothing pinned). The inviter waits for the joiner's MAC'ed
// confirmation; the joiner sends it and waits for the inviter's MAC'ed answer. When ctx ends
// first the session is cancelled (api.ErrPairCancelled) and nothing is pinned on this side.
// Calling it again with the same answer waits again; with the other answer fails (api.ErrPairState).
func (h *Service) ConfirmPairing(ctx context.Context, accept bool) (api.Peer, error) {
	h.mu.Lock()
	s := h.s
	if s == nil {
		h.mu.Unlock()
		return api.Peer{}, fmt.Errorf("pairing: confirm pairing: %w", api.ErrNoPairing)
	}
	h.expireLocked(s, h.cfg.Clock())
	want := declined
	if accept {
		want = accepted
	}
	switch {
	case s.state == api.PairDone:
		h.mu.Unlock()
		if !accept {
			return api.Peer{}, fmt.Errorf("pairing: confirm pairing: %w: the peer is pinned already", api.ErrPairState)
		}
		return s.peer, nil
	case s.state.Final():
		err := s.err
		h.mu.Unlock()
		return api.Peer{}, fmt.Errorf("pairing: confirm pairing: %w", err)
	case s.state != api.PairCode && s.state != api.PairConfirmed:
		h.mu.Unlock()
		return api.Peer{}, fmt.Errorf("pairing: confirm pairing: %w: no code to confirm yet (%s)", api.ErrPairState, s.state)
	case s.mine != undecided && s.mine != want:
		h.mu.Unlock()
		return api.Peer{}, fmt.Errorf("pairing: confirm pairing: %w: answered already", api.ErrPairState)
	}
	if s.role == api.PairJoiner {
		if !accept {
			s.mine = declined
			h.finishLocked(s, api.PairDeclined, fmt.Errorf("%w on this host", api.ErrPairDeclined))
			h.mu.Unlock()
			h.cfg.Logger.Info("pairing declined", logkey.Role, "joiner", logkey.Peer, s.peer.Host)
			h.pairSendDecline(ctx, s)
			return api.Peer{}, fmt.Errorf("pairing: confirm pairing: %w", api.ErrPairDeclined)
		}
		s.mine = accepted
		s.state = api.PairConfirmed
		h.notifyLocked()
		h.mu.Unlock()
		return h.joinerConfirm(ctx, s)
	}
	defer h.mu.Unlock()
	if !accept {
		s.mine = declined
		h.finishLocked(s, api.PairDeclined, fmt.Errorf("%w on this host", api.ErrPairDeclined))
		h.cfg.Logger.Info("pairing declined", logkey.Role, "inviter", logkey.Peer, s.peer.Host)
		return api.Peer{}, fmt.Errorf("pairing: confirm pairing: %w", api.ErrPairDeclined)
	}
	s.mine = accepted
	if s.theirs == accepted {
		h.completeLocked(s)
	} else if s.state == api.PairCode {
		s.state = api.PairConfirmed
		h.notifyLocked()
	}
	for !s.state.Final() {
		ch := h.changed
		until := s.expires.Sub(h.cfg.Clock())
		h.mu.Unlock()
		err := waitChange(ctx, ch, until)
		h.mu.Lock()
		h.expireLocked(s, h.cfg.Clock())
		if err != nil && !s.state.Final() {
			h.finishLocked(s, api.PairFailed, fmt.Errorf("%w: %v", api.ErrPairCancelled, err))
			h.cfg.Logger.Info("pairing cancelled", logkey.Role, "inviter", logkey.Peer, s.peer.Host)
		}
	}
	if s.state != api.PairDone {
		return api.Peer{}, fmt.Errorf("pairing: confirm pairing: %w", s.err)
	}
	return s.peer, nil
}

// completeLocked pins the peer of a session both users accepted.
func (h *Service) completeLocked(s *pairSession) {
	if err := h.cfg.Pins.Pin(s.peer); err != nil {
		h.cfg.Logger.Warn("pairing: pin failed", logkey.Role, s.role.String(), logkey.Peer, s.peer.Host, logkey.Err, err)
		h.finishLocked(s, api.PairFailed, err)
		return
	}
	h.cfg.Logger.Info("pairing done", logkey.Role, s.role.String(), logkey.Peer, s.peer.Host, logkey.Fingerprint, mbx.Fingerprint(s.peer.HostPubkey))
	h.finishLocked(s, api.PairDone, nil)
}

// CancelPairing ends the open pairing session without pinning. A joiner that has the code tells
// the inviter it declines (best effort, bounded by ctx). It is not an error when the session is
// over already.
func (h *Service) CancelPairing(ctx context.Context) error {
	h.mu.Lock()
	s := h.s
	if s == nil {
		h.mu.Unlock()
		return fmt.Errorf("pairing: cancel pairing: %w", api.ErrNoPairing)
	}
	if s.state.Final() {
		h.mu.Unlock()
		return nil
	}
	tell := s.role == api.PairJoiner && (s.state == api.PairCode || s.state == api.PairConfirmed)
	h.finishLocked(s, api.PairFailed, api.ErrPairCancelled)
	h.mu.Unlock()
	h.cfg.Logger.Info("pairing cancelled", logkey.Role, s.role.String())
	if tell {
		h.pairSendDecline(ctx, s)
	}
	return nil
}

// JoinPairing is the first half of a join: it asks the inviter at addr (host or host:port,
// default port 7373) for its hello, proves the token with the join MAC, checks the inviter's
// accept MAC and its enc-key ad, and returns the session with the code to show. ConfirmPairing
// then gives the user's answer. Nothing is pinned until then. A malformed or wrong token fails
// with api.ErrPairToken, a session there that expired with api.ErrPairExpired, none with api.ErrNoPairing.
func (h *Service) JoinPairing(ctx context.Context, addr, token string) (api.PairingState, error) {
	dial, err := normalizeDialAddr(addr)
	if err != nil {
		return api.PairingState{}, fmt.Errorf("pairing: join: %w: %v", api.ErrBadRequest, err)
	}
	tok, err := mbx.NormalizePairToken(token)
	if err != nil {
		return api.PairingState{}, fmt.Errorf("pairing: join: %w (want XXXX-XXXX-XXXX)", api.ErrPairToken)
	}
	h.mu.Lock()
	now := h.cfg.Clock()
	if h.openLocked(now) {
		h.mu.Unlock()
		return api.PairingState{}, fmt.Errorf("pairing: join: %w", api.ErrPairBusy)
	}
	s := &pairSession{role: api.PairJoiner, state: api.PairJoining, remote: dial, expires: now.Add(ConfirmWindow)}
	h.s = s
	h.notifyLocked()
	h.mu.Unlock()

	fail := func(err error) (api.PairingState, error) {
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			err = fmt.Errorf("%w: %w", api.ErrPairCancelled, err)
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		state := api.PairFailed
		if errors.Is(err, api.ErrPairExpired) {
			state = api.PairExpired
		}
		h.finishLocked(s, state, err)
		h.cfg.Logger.Info("pairing: join failed", logkey.Inviter, dial, logkey.Err, err)
		return s.snapshot(), fmt.Errorf("pairing: join %s: %w", dial, err)
	}
	var hello mbx.PairHello
	if err := h.pairCall(ctx, "GET", dial, pathPairHello, nil, &hello); err != nil {
		return fail(err)
	}
	a, err := helloParty(hello)
	if err != nil {
		return fail(err)
	}
	if err := h.pairConflict(a.Host, a.HostPubkey); err != nil {
		return fail(err)
	}
	key, err := mbx.PairTokenKey(tok)
	if err != nil {
		return fail(fmt.Errorf("%w: %v", api.ErrPairToken, err))
	}
	nonce, err := newPairNonce(h.cfg.Rand)
	if err != nil {
		return fail(err)
	}
	b := mbx.PairParty{Host: h.cfg.Identity.Name(), HostPubkey: h.cfg.Identity.Key().PublicKey(), Nonce: nonce}
	adv := h.cfg.AdvertiseAddr()
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
	req := mbx.PairJoinRequest{V: 1, ANonce: a.Nonce, B: mbx.WirePairParty(b, &adv), MACJoin: macJoin, EncAd: myAd}
	var ans mbx.PairJoinAnswer
	if err := h.pairCall(ctx, "POST", dial, pathPairJoin, req, &ans); err != nil {
		return fail(err)
	}
	macAccept, err := mbx.PairMAC(key, mbx.PairMACAccept, transcript)
	if err != nil {
		return fail(err)
	}
	if !mbx.PairMACEqual(macAccept, ans.MACAccept) {
		return fail(fmt.Errorf("%w: the inviter's accept MAC does not verify (it does not hold this token)", api.ErrPairToken))
	}
	ad, err := mbx.CheckEncAd(ans.EncAd.Ad, ans.EncAd.Sig, mbx.EncAdPeer{Host: a.Host, HostPubkey: a.HostPubkey}, h.cfg.Clock())
	if err != nil {
		return fail(fmt.Errorf("%w: the inviter's enc-key ad: %w", api.ErrPairProtocol, err))
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if s.state.Final() { // cancelled meanwhile
		return s.snapshot(), fmt.Errorf("pairing: join %s: %w", dial, s.err)
	}
	s.a, s.b, s.bAddr, s.key, s.transcript = a, b, adv, key, transcript
	s.code = mbx.PairingCode(a, b)
	s.peer = api.Peer{Host: a.Host, HostPubkey: a.HostPubkey, Fingerprint: mbx.Fingerprint(a.HostPubkey), EncPub: ad.EncPub, Addr: dial}
	s.state = api.PairCode
	s.expires = h.cfg.Clock().Add(ConfirmWindow)
	h.notifyLocked()
	h.cfg.Logger.Info("pairing: joined", logkey.Role, "joiner", logkey.Peer, a.Host, logkey.Fingerprint, mbx.Fingerprint(a.HostPubkey))
	return s.snapshot(), nil
}

// Join pairs this host with the inviter at addr using token: JoinPairing, then confirm (the
// user's comparison of the code, shown with the inviter's name and fingerprint), then
// ConfirmPairing with its answer. It returns the pinned peer, or an error and pins nothing.
func Join(ctx context.Context, h api.PairingService, addr, token string, confirm func(code string, peer api.Peer) bool) (api.Peer, error) {
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
func Invite(ctx context.Context, h api.PairingService, ttl time.Duration, show func(token string), confirm func(code string, peer api.Peer) bool) (api.Peer, error) {
	token, err := h.StartPairing(ctx, ttl)
	if err != nil {
		return api.Peer{}, err
	}
	show(token)
	st, err := h.WaitPairing(ctx, api.PairWaiting)
	if err != nil {
		h.CancelPairing(ctx)
		return api.Peer{}, fmt.Errorf("pairing: invite: %w: %w", api.ErrPairCancelled, err)
	}
	if st.State != api.PairCode {
		if err := st.Err(); err != nil {
			return api.Peer{}, fmt.Errorf("pairing: invite: %w", err)
		}
		return api.Peer{}, fmt.Errorf("pairing: invite: %w: %s", api.ErrPairState, st.State)
	}
	return h.ConfirmPairing(ctx, confirm(st.Code, *st.Peer))
}

// joinerConfirm sends the joiner's accept to the inviter until the inviter answers for good,
// then pins the inviter when it accepted too.
func (h *Service) joinerConfirm(ctx context.Context, s *pairSession) (api.Peer, error) {
	end := func(state api.PairState, err error) (api.Peer, error) {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.finishLocked(s, state, err)
		if s.state == api.PairDone {
			return s.peer, nil
		}
		return api.Peer{}, fmt.Errorf("pairing: confirm pairing: %w", s.err)
	}
	for {
		h.mu.Lock()
		h.expireLocked(s, h.cfg.Clock())
		final := s.state.Final()
		h.mu.Unlock()
		if final { // expired or cancelled
			return end(api.PairFailed, nil)
		}
		ans, err := h.pairSendConfirm(ctx, s, true)
		if err != nil {
			var te *pairTransientError
			if ctx.Err() == nil && errors.As(err, &te) {
				h.cfg.Logger.Warn("pairing: inviter unreachable, retrying", logkey.Inviter, s.remote, logkey.Err, err)
				if werr := pairPause(ctx); werr == nil {
					continue
				}
			}
			if ctx.Err() != nil {
				h.pairSendDecline(ctx, s)
				return end(api.PairFailed, fmt.Errorf("%w: %v", api.ErrPairCancelled, ctx.Err()))
			}
			state := api.PairFailed
			switch {
			case errors.Is(err, api.ErrPairDeclined):
				state = api.PairDeclined
			case errors.Is(err, api.ErrPairExpired):
				state = api.PairExpired
			}
			return end(state, err)
		}
		switch ans.State {
		case "waiting":
			if err := pairPause(ctx); err != nil {
				h.pairSendDecline(ctx, s)
				return end(api.PairFailed, fmt.Errorf("%w: %v", api.ErrPairCancelled, err))
			}
		case "done", "declined":
			ok := ans.State == "done"
			want, err := mbx.PairConfirmMAC(s.key, mbx.PairMACConfirmInviter, s.transcript, ok)
			if err != nil || ans.Accept != ok || !mbx.PairMACEqual(want, ans.MAC) {
				return end(api.PairFailed, fmt.Errorf("%w: the inviter's answer does not verify", api.ErrPairProtocol))
			}
			if !ok {
				h.cfg.Logger.Info("pairing declined by the inviter", logkey.Peer, s.peer.Host)
				return end(api.PairDeclined, fmt.Errorf("%w by the inviting host", api.ErrPairDeclined))
			}
			h.mu.Lock()
			if !s.state.Final() {
				h.completeLocked(s)
			}
			h.mu.Unlock()
			return end(api.PairFailed, nil)
		default:
			return end(api.PairFailed, fmt.Errorf("%w: unknown confirm state %q", api.ErrPairProtocol, clip(ans.State)))
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
func (h *Service) pairConflict(host, key string) error {
	if host == h.cfg.Identity.Name() || key == h.cfg.Identity.Key().PublicKey() {
		return fmt.Errorf("%w: the other host has this host's name or key (%s)", api.ErrPairConflict, host)
	}
	pinned, err := h.cfg.Pins.PinnedKey(host)
	if err != nil {
		return err
	}
	if pinned != "" && pinned != key {
		return fmt.Errorf("%w: %s is pinned with key %s, the other host has %s", api.ErrPairConflict, host,
			mbx.Fingerprint(pinned), mbx.Fingerprint(key))
	}
	name, err := h.cfg.Pins.PinnedName(key)
	if err != nil {
		return err
	}
	if name != "" && name != host {
		return fmt.Errorf("%w: key %s is pinned as %s, the other host calls itself %s", api.ErrPairConflict,
			mbx.Fingerprint(key), name, host)
	}
	return nil
}

// pairEncAd is this host's signed v2 enc-key ad for the exchange.
func (h *Service) pairEncAd() (mbx.EncAdPublish, error) {
	ad, sig, err := mbx.SignEncAdV2(h.cfg.Identity.Name(), h.cfg.Identity.Key(), h.cfg.Identity.EncKey().PublicKey(), h.cfg.Clock(), 0)
	if err != nil {
		return mbx.EncAdPublish{}, err
	}
	return ad.Publish(sig)
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
// a bare IPv6 address, optionally with http://; the port defaults to mbx.DefaultHostPort.
func normalizeDialAddr(s string) (string, error) {
	s = strings.TrimSpace(s)
	s = strings.TrimPrefix(s, "http://")
	s = strings.TrimSuffix(s, "/")
	if s == "" {
		return "", errors.New("empty address")
	}
	if _, _, err := net.SplitHostPort(s); err != nil {
		if ip := net.ParseIP(strings.Trim(s, "[]")); ip != nil {
			s = net.JoinHostPort(ip.String(), fmt.Sprint(mbx.DefaultHostPort))
		} else {
			s = net.JoinHostPort(s, fmt.Sprint(mbx.DefaultHostPort))
		}
	}
	if err := mbx.CheckDialAddr(s); err != nil {
		return "", err
	}
	return s, nil
}
