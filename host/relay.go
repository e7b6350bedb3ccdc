package host

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/bbolt"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/inbox"
	"github.com/agentmbx/agentmbx/internal/logkey"
	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/quarantine"
	"github.com/agentmbx/agentmbx/relayclient"
	"github.com/agentmbx/agentmbx/relaylink"
)

// The relay: the second transport, for peers the LAN does not reach (docs/design.md: Relay identity
// and pinning, Push and acceptance, Receive checkpoint and ack, Enrolment and publications,
// Delivery receipts, Choosing a transport).
//
// The owner pins one relay (RelaySet: its URL and its relay key). Everything this host learns
// about it lives in one record (bucket "relay", key "state"), reset when the pin changes: the
// epoch last seen, the limits, the enrolment cache, the last enc-key ad and sender allowlist
// published, a served key that differed from the pin, and the last failure of each operation.
// A served key other than the pinned one stops all relay use until the owner confirms the new
// key with RelaySet.
//
// relay_send.go is the sending side (transport selection and push), relay_recv.go the receiving
// side (the inbox.Handler, quarantine release), relay_enrol.go enrolment and publications, and
// relay_daemon.go the daemon's loops.

var (
	bucketRelay   = []byte("relay")
	relayStateKey = []byte("state")
)

// Operations whose last failure RelayStatus reports.
const (
	opInfo    = relaylink.OpInfo
	opEnrol   = relaylink.OpEnrol
	opEncAd   = relaylink.OpEncAd
	opSenders = relaylink.OpSenders
	opPush    = relaylink.OpPush
	opPull    = relaylink.OpPull
)

// relayState is the relay bucket's record: the pinned relay and what this host knows of it.
type relayState struct {
	URL      string `json:"url"`
	RelayKey string `json:"relay_pubkey"`
	PinnedAt string `json:"pinned_at"`
	TOFU     bool   `json:"tofu,omitempty"`
	// CA is the PEM bundle of a private CA trusted for the relay's certificate ("" for none).
	CA string `json:"ca,omitempty"`
	// TokenFile holds the account token to enrol with ("" for $MBX_RELAY_TOKEN or none).
	TokenFile string `json:"token_file,omitempty"`

	// Epoch is the relay epoch last seen in an info, push or pull answer ("" before any).
	Epoch string `json:"epoch,omitempty"`
	// KeyChange is set when the relay served another key: relay use is stopped.
	KeyChange *api.RelayKeyChange `json:"key_change,omitempty"`

	// Published is what the keeper learned: limits, the enrolment cache, the publications.
	relaylink.Published

	Problems map[string]api.RelayProblem `json:"problems,omitempty"`
}

func (s *relayState) pin() relayclient.Pin {
	return relayclient.Pin{URL: s.URL, RelayKey: s.RelayKey}
}

func (s *relayState) limits() mbx.Limits {
	if s.Limits != nil {
		return *s.Limits
	}
	return mbx.DefaultLimits()
}

// enrolledFor reports whether the enrolment cache holds for this relay, epoch and host key.
func (s *relayState) enrolledFor(epoch, hostKey string) bool {
	return s.Enrolled.EnrolledFor(s.pin(), epoch, hostKey)
}

func loadRelayTx(tx *bbolt.Tx) (*relayState, error) {
	b := tx.Bucket(bucketRelay)
	if b == nil {
		return nil, nil
	}
	var s relayState
	found, err := getJSON(b, relayStateKey, &s)
	if err != nil || !found {
		return nil, err
	}
	return &s, nil
}

func saveRelayTx(tx *bbolt.Tx, s *relayState) error {
	b, err := tx.CreateBucketIfNotExists(bucketRelay)
	if err != nil {
		return err
	}
	if s == nil {
		return b.Delete(relayStateKey)
	}
	return putJSON(b, relayStateKey, s)
}

// loadRelay reads the relay record (nil when no relay is pinned).
func (h *Host) loadRelay() (*relayState, error) {
	var s *relayState
	err := h.db.View(func(tx *bbolt.Tx) error {
		var err error
		s, err = loadRelayTx(tx)
		return err
	})
	return s, err
}

// updateRelay changes the record of the relay at url (and relay key key) in one transaction; fn
// is not called when another relay (or none) is pinned meanwhile. It reports whether fn ran.
func (h *Host) updateRelay(url, key string, fn func(tx *bbolt.Tx, s *relayState) error) (bool, error) {
	ran := false
	err := h.db.Update(func(tx *bbolt.Tx) error {
		ran = false
		s, err := loadRelayTx(tx)
		if err != nil || s == nil || s.URL != url || s.RelayKey != key {
			return err
		}
		if err := fn(tx, s); err != nil {
			return err
		}
		ran = true
		return saveRelayTx(tx, s)
	})
	return ran, err
}

// relayRuntime is the in-memory side of the relay: the client of the pinned relay, the daemon's
// signals, and which peers the LAN did not reach.
type relayRuntime struct {
	mu       sync.Mutex
	link     *relayLink
	problems map[string]string // op → the error last recorded (mirror of the record)
	epoch    string            // the epoch last recorded for link (mirror of the record)
	lanDown  map[string]time.Time
	// pausedUntil: no push goes to the relay before then (its Retry-After, a rate refusal).
	pausedUntil time.Time
	recv        *inbox.Receiver // the daemon's (or a test's) receiver for link

	changed chan struct{} // the pin changed or relay use stopped: the daemon restarts its loops
	keep    chan struct{} // run the enrolment and publications now (peers changed, re-enrol)
	keepMu  sync.Mutex    // one maintenance at a time
	// enrolled counts the enrolments made (under keepMu): a forced re-enrolment asked for
	// before one of them completed is already answered by it.
	enrolled atomic.Uint64
}

func (r *relayRuntime) init() {
	r.changed = make(chan struct{}, 1)
	r.keep = make(chan struct{}, 1)
	r.lanDown = map[string]time.Time{}
}

func poke(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// relayLink is the pinned relay in use: its pin and a client for it.
type relayLink struct {
	pin relayclient.Pin
	c   *relayclient.Client
}

// relayLink returns the link to the pinned relay, or nil when none is pinned or relay use is
// stopped (the error says which: ErrNoRelay, ErrRelayStopped).
func (h *Host) relayLink() (*relayLink, error) {
	h.rl.mu.Lock()
	defer h.rl.mu.Unlock()
	if h.rot.gate.Load() {
		return nil, ErrRelayRotating
	}
	if h.rl.link != nil {
		return h.rl.link, nil
	}
	s, err := h.loadRelay()
	if err != nil {
		return nil, err
	}
	if s == nil {
		return nil, ErrNoRelay
	}
	if s.KeyChange != nil {
		return nil, ErrRelayStopped
	}
	c, err := relayclient.New(s.pin(), h.name, h.key, &relayclient.Options{Clock: h.clock, Logger: h.log, CA: []byte(s.CA)})
	if err != nil {
		return nil, err
	}
	h.rl.link = &relayLink{pin: s.pin(), c: c}
	h.rl.recv = nil
	h.rl.epoch = s.Epoch
	h.rl.problems = map[string]string{}
	for op, p := range s.Problems {
		h.rl.problems[op] = p.Error
	}
	return h.rl.link, nil
}

// relayUsable reports whether rows may go to the relay now, and the link when they may.
func (h *Host) relayUsable() *relayLink {
	l, err := h.relayLink()
	if err != nil || l.c.Stopped() != nil {
		return nil
	}
	return l
}

// dropLink forgets the link (the pin changed, or relay use stopped) and tells the daemon.
func (h *Host) dropLink() {
	h.rl.mu.Lock()
	h.rl.link, h.rl.recv = nil, nil
	h.rl.mu.Unlock()
	poke(h.rl.changed)
}

// relayFailed looks at an error of a relay operation: a changed relay key stops relay use (and
// is recorded for the owner), a refused hop asks for a re-enrolment. It records the problem of
// op and returns err.
func (h *Host) relayFailed(l *relayLink, op string, err error) error {
	var kc *relayclient.KeyChangedError
	if errors.As(err, &kc) {
		h.relayKeyChanged(l, kc)
	}
	if errors.Is(err, relayclient.ErrNotEnrolled) {
		poke(h.rl.keep)
	}
	h.relayProblem(l, op, err)
	return err
}

// relayKeyChanged records that the relay at l served another key and stops relay use.
func (h *Host) relayKeyChanged(l *relayLink, kc *relayclient.KeyChangedError) {
	now := mbx.ISOTime(h.clock())
	ran, err := h.updateRelay(l.pin.URL, l.pin.RelayKey, func(_ *bbolt.Tx, s *relayState) error {
		if s.KeyChange == nil {
			s.KeyChange = &api.RelayKeyChange{Pinned: kc.Pinned, Served: kc.Served, At: now}
		}
		return nil
	})
	if err != nil {
		h.log.Error("recording a relay key change", logkey.Relay, l.pin.URL, logkey.Err, err)
	}
	if ran {
		h.log.Error("relay key changed: relay use stopped until the owner confirms the new key with `agentmbx relay set`",
			logkey.Relay, l.pin.URL, logkey.Pinned, kc.Pinned, logkey.Served, kc.Served)
	}
	h.dropLink()
}

// relayProblem records the outcome of op: err nil clears its problem. It writes only when the
// recorded problem changes.
func (h *Host) relayProblem(l *relayLink, op string, err error) {
	msg := ""
	if err != nil {
		msg = clip(err.Error(), 500)
	}
	h.rl.mu.Lock()
	same := h.rl.link == l && h.rl.problems != nil && h.rl.problems[op] == msg
	h.rl.mu.Unlock()
	if same {
		return
	}
	now := mbx.ISOTime(h.clock())
	_, werr := h.updateRelay(l.pin.URL, l.pin.RelayKey, func(_ *bbolt.Tx, s *relayState) error {
		if msg == "" {
			delete(s.Problems, op)
			return nil
		}
		if s.Problems == nil {
			s.Problems = map[string]api.RelayProblem{}
		}
		s.Problems[op] = api.RelayProblem{Op: op, Error: msg, At: now}
		return nil
	})
	if werr != nil {
		h.log.Error("recording a relay problem", logkey.Op, op, logkey.Err, werr)
		return
	}
	h.rl.mu.Lock()
	if h.rl.link == l && h.rl.problems != nil {
		if msg == "" {
			delete(h.rl.problems, op)
		} else {
			h.rl.problems[op] = msg
		}
	}
	h.rl.mu.Unlock()
}

// relayEpochSeen takes note of the epoch a relay answer carried. A change from a known epoch means
// the relay's store may have lost what it accepted (a restore, a reset): every relay-accepted row
// at this relay is flagged for a re-push, the receive position goes back to 0 in the new epoch, and
// the enrolment is redone (docs/design.md: Epochs, restarts and restores, Enrolment and
// publications). It reports whether the epoch changed.
func (h *Host) relayEpochSeen(l *relayLink, epoch string) bool {
	if epoch == "" || len(epoch) > inbox.MaxEpochLen {
		return false
	}
	h.rl.mu.Lock()
	known := h.rl.link == l && h.rl.epoch == epoch
	h.rl.mu.Unlock()
	if known {
		return false
	}
	changed, repushed := false, 0
	_, err := h.updateRelay(l.pin.URL, l.pin.RelayKey, func(tx *bbolt.Tx, s *relayState) error {
		changed, repushed = false, 0
		if s.Epoch == epoch {
			return nil
		}
		old := s.Epoch
		s.Epoch = epoch
		if old == "" {
			return nil
		}
		changed = true
		s.Enrolled, s.EncAd, s.Senders = nil, nil, nil
		n, err := h.ob.In(tx).RepushRelay(l.pin.URL, epoch)
		if err != nil {
			return err
		}
		repushed = n
		pos, err := h.rpos.In(tx).Position(l.pin.URL)
		if err != nil {
			return err
		}
		if pos.Epoch != epoch {
			if _, _, err := h.rpos.In(tx).Reset(l.pin.URL, epoch, inbox.ResetEpochChanged); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		h.log.Error("recording the relay epoch", logkey.Relay, l.pin.URL, logkey.Err, err)
		return false
	}
	h.rl.mu.Lock()
	if h.rl.link == l {
		h.rl.epoch = epoch
	}
	h.rl.mu.Unlock()
	if changed {
		h.log.Warn("relay epoch changed: re-pushing relay-accepted rows, pulling again from 0, enrolling again",
			logkey.Relay, l.pin.URL, logkey.Epoch, epoch, logkey.Repush, repushed)
		h.afterEpochChange()
	}
	return changed
}

// afterEpochChange wakes what an epoch change concerns: the outbox (re-pushes), the receiver and
// the enrolment.
func (h *Host) afterEpochChange() {
	h.kickOutbox()
	poke(h.rl.keep)
	h.rl.mu.Lock()
	r := h.rl.recv
	h.rl.mu.Unlock()
	if r != nil {
		r.Kick()
	}
}

// ---- the owner's commands ------------------------------------------------------------------------

// RelaySet pins the relay at req.URL: it fetches the relay's info, checks the served key against
// req.Key when one is given (refusing a mismatch with ErrRelayKeyMismatch) or trusts it on first
// use, and stores the pin. Pinning the relay already pinned with the same key keeps what this
// host knows of it; a new URL or key starts afresh (enrolment and publications follow). Setting
// the relay again is also how the owner confirms a key change that stopped relay use. Nothing is
// stored when any check fails.
func (h *Host) RelaySet(ctx context.Context, req api.RelaySetRequest) (api.RelayStatus, error) {
	url, err := relayclient.NormalizeURL(strings.TrimSpace(req.URL))
	if err != nil {
		return api.RelayStatus{}, fmt.Errorf("host: relay set: %w: %v", ErrInvalid, err)
	}
	fp := strings.TrimSpace(req.Key)
	if fp != "" {
		if _, err := mbx.ParseFingerprint(fp); err != nil {
			return api.RelayStatus{}, fmt.Errorf("host: relay set: %w: key %q is not a fingerprint (xxxx-xxxx-xxxx-xxxx) or a base64 key", ErrInvalid, clip(fp, 60))
		}
	}
	if req.CA != "" {
		if _, err := relayclient.CertPool([]byte(req.CA)); err != nil {
			return api.RelayStatus{}, fmt.Errorf("host: relay set: %w: %v", ErrInvalid, err)
		}
	}
	if err := checkTokenFile(req.TokenFile); err != nil {
		return api.RelayStatus{}, fmt.Errorf("host: relay set: %w: %v", ErrInvalid, err)
	}
	info, err := relayclient.Discover(ctx, url, &relayclient.Options{Clock: h.clock, Logger: h.log, CA: []byte(req.CA)})
	if err != nil {
		return api.RelayStatus{}, fmt.Errorf("host: relay set %s: %w: %w", url, ErrRelayUnreachable, err)
	}
	pin, err := relayclient.PinInfo(url, info, fp)
	if err != nil {
		var kc *relayclient.KeyChangedError
		if errors.As(err, &kc) {
			return api.RelayStatus{}, fmt.Errorf("host: relay set %s: %w: it serves %s, you gave %s", url, ErrRelayKeyMismatch, kc.Served, kc.Pinned)
		}
		return api.RelayStatus{}, fmt.Errorf("host: relay set %s: %w: %w", url, ErrRelayUnreachable, err)
	}
	replaced := ""
	err = h.db.Update(func(tx *bbolt.Tx) error {
		replaced = ""
		old, err := loadRelayTx(tx)
		if err != nil {
			return err
		}
		if old != nil && old.URL == pin.URL && old.RelayKey == pin.RelayKey {
			if old.KeyChange != nil || (fp != "" && old.TOFU) || old.CA != req.CA || old.TokenFile != req.TokenFile {
				old.KeyChange = nil
				old.TOFU = old.TOFU && fp == ""
				old.CA = req.CA
				if old.TokenFile != req.TokenFile {
					// Another token (or none) proves another account: enrol again with it.
					old.TokenFile, old.Enrolled = req.TokenFile, nil
				}
				return saveRelayTx(tx, old)
			}
			return nil
		}
		if old != nil && old.RelayKey != pin.RelayKey {
			replaced = mbx.Fingerprint(old.RelayKey)
		}
		lim := info.Limits
		return saveRelayTx(tx, &relayState{URL: pin.URL, RelayKey: pin.RelayKey, PinnedAt: mbx.ISOTime(h.clock()),
			TOFU: fp == "", CA: req.CA, TokenFile: req.TokenFile, Published: relaylink.Published{Limits: &lim}, Epoch: info.Epoch})
	})
	if err != nil {
		return api.RelayStatus{}, fmt.Errorf("host: relay set: %w", err)
	}
	h.dropLink()
	poke(h.rl.keep)
	h.kickOutbox()
	h.log.Info("relay pinned", logkey.Relay, pin.URL, logkey.Fingerprint, pin.Fingerprint(), logkey.TOFU, fp == "", logkey.Replaced, replaced)
	st, err := h.RelayStatus(ctx)
	st.Replaced = replaced
	return st, err
}

// RelayUnset forgets the pinned relay. Rows the relay accepted stay relay-accepted: their delivery
// receipts (over the LAN) still settle them, and their deadlines still stand.
func (h *Host) RelayUnset(ctx context.Context) (api.RelayStatus, error) {
	if err := ctx.Err(); err != nil {
		return api.RelayStatus{}, err
	}
	err := h.db.Update(func(tx *bbolt.Tx) error {
		s, err := loadRelayTx(tx)
		if err != nil {
			return err
		}
		if s == nil {
			return ErrNoRelay
		}
		return saveRelayTx(tx, nil)
	})
	if err != nil {
		return api.RelayStatus{}, fmt.Errorf("host: relay unset: %w", err)
	}
	h.dropLink()
	h.log.Info("relay unset")
	return h.RelayStatus(ctx)
}

// RelayStatus reports the pinned relay and what this host knows and did with it.
func (h *Host) RelayStatus(ctx context.Context) (api.RelayStatus, error) {
	if err := ctx.Err(); err != nil {
		return api.RelayStatus{}, err
	}
	var st api.RelayStatus
	err := h.db.View(func(tx *bbolt.Tx) error {
		n, err := h.quar.In(tx).Count()
		if err != nil {
			return err
		}
		st.Quarantined = n
		s, err := loadRelayTx(tx)
		if err != nil || s == nil {
			return err
		}
		st.Configured, st.URL, st.RelayPubkey, st.Fingerprint = true, s.URL, s.RelayKey, mbx.Fingerprint(s.RelayKey)
		st.PinnedAt, st.TOFU, st.Epoch, st.CA = s.PinnedAt, s.TOFU, s.Epoch, s.CA
		st.Account, st.Token = s.Account, tokenStatus(s.TokenFile, h.clock())
		if s.KeyChange != nil {
			st.Stopped = true
			kc := *s.KeyChange
			st.KeyChange = &kc
		}
		if s.enrolledFor(s.Epoch, h.key.PublicKey()) {
			st.Enrolled, st.EnrolledAt = true, s.Enrolled.At
		}
		if s.EncAd != nil {
			st.EncAdAt, st.EncAdExp = s.EncAd.At, s.EncAd.Exp
		}
		if s.Senders != nil {
			st.SendersAt, st.Senders = s.Senders.At, s.Senders.Count
			if st.SendersCurrent, err = sendersCurrentTx(tx, s); err != nil {
				return err
			}
		}
		for _, p := range s.Problems {
			st.Problems = append(st.Problems, p)
		}
		slices.SortFunc(st.Problems, func(a, b api.RelayProblem) int { return strings.Compare(a.Op, b.Op) })
		pos, err := h.rpos.In(tx).Position(s.URL)
		if err != nil {
			return err
		}
		st.ReceivedThrough, st.PositionEpoch, st.Resets = pos.ReceivedThrough, pos.Epoch, pos.Resets
		rows, err := h.ob.In(tx).RelayAccepted(s.URL)
		st.RelayAccepted = len(rows)
		return err
	})
	if err != nil {
		return api.RelayStatus{}, fmt.Errorf("host: relay status: %w", err)
	}
	h.mu.Lock()
	st.Daemon = h.daemon
	h.mu.Unlock()
	return st, nil
}

// RelayQuarantine lists the relay items this host rejected, oldest relay position first.
func (h *Host) RelayQuarantine(ctx context.Context) ([]api.QuarantineItem, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var out []api.QuarantineItem
	err := h.db.View(func(tx *bbolt.Tx) error {
		es, err := h.quar.In(tx).List(quarantine.Filter{})
		if err != nil {
			return err
		}
		peers, err := peersTx(tx)
		if err != nil {
			return err
		}
		out = make([]api.QuarantineItem, 0, len(es))
		for _, e := range es {
			it := api.QuarantineItem{Relay: e.Relay, Epoch: e.Epoch, Seq: e.Seq, ItemID: e.ItemID, Kind: e.Kind,
				Sender: e.Sender, Cause: e.Cause.String(), Reason: e.Reason, Bytes: e.Bytes, At: isoOrEmpty(e.At)}
			if p, ok := peerWithKey(peers, e.Sender); ok {
				it.Host = p.Host
			}
			out = append(out, it)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("host: relay quarantine: %w", err)
	}
	return out, nil
}

// peerWithKey finds the peer whose current or retired host key is key.
func peerWithKey(peers []PeerRecord, key string) (PeerRecord, bool) {
	for _, p := range peers {
		if p.HostPubkey == key || slices.Contains(p.RetiredKeys, key) {
			return p, true
		}
	}
	return PeerRecord{}, false
}

// Host implements api.RelayService on its store.
var _ api.RelayService = (*Host)(nil)
