package relaylink

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.etcd.io/bbolt"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/internal/logkey"
	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/quarantine"
	"github.com/agentmbx/agentmbx/relayclient"
)

// The owner's commands: a Link is the host's api.RelayService.
var _ api.RelayService = (*Link)(nil)

// RelaySet pins the relay at req.URL: it fetches the relay's info, checks the served key against
// req.Key when one is given (refusing a mismatch with ErrRelayKeyMismatch) or trusts it on first
// use, and stores the pin. Pinning the relay already pinned with the same key keeps what the host
// knows of it; a new URL or key starts afresh (enrolment and publications follow). Setting the
// relay again is also how the owner confirms a key change that stopped relay use. Nothing is
// stored when any check fails.
func (l *Link) RelaySet(ctx context.Context, req api.RelaySetRequest) (api.RelayStatus, error) {
	url, err := relayclient.NormalizeURL(strings.TrimSpace(req.URL))
	if err != nil {
		return api.RelayStatus{}, fmt.Errorf("host: relay set: %w: %v", ErrInvalid, err)
	}
	if relayclient.PlainRemote(url) && !req.AllowHTTP {
		return api.RelayStatus{}, api.WithHint(fmt.Errorf("host: relay set: %w: %s is plain http to a relay that is not on this machine", ErrInvalid, url),
			"use https://, or give --allow-http to accept that who talks to whom travels in clear (hops stay signed, bodies sealed)")
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
	info, err := relayclient.Discover(ctx, url, l.clientOptions(req.CA))
	if errors.Is(err, relayclient.ErrV1Only) {
		return l.setV1(ctx, url, fp, req)
	}
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
	return l.pin(ctx, pin, fp, req, &info)
}

// pin stores the pin checked by RelaySet (info nil: a relay accepted as v1), starts using it and
// reports the status.
func (l *Link) pin(ctx context.Context, pin relayclient.Pin, fp string, req api.RelaySetRequest, info *mbx.InfoResponse) (api.RelayStatus, error) {
	replaced, err := l.pinTx(pin, fp, req, info)
	if err != nil {
		return api.RelayStatus{}, fmt.Errorf("host: relay set: %w", err)
	}
	l.Drop()
	poke(l.keep)
	l.host.KickOutbox()
	if info == nil {
		l.log.Warn("relay pinned as v1: it has no key, nothing it answers is signed", logkey.Relay, pin.URL, logkey.Replaced, replaced)
	} else {
		l.log.Info("relay pinned", logkey.Relay, pin.URL, logkey.Fingerprint, pin.Fingerprint(), logkey.TOFU, fp == "", logkey.Replaced, replaced)
	}
	st, err := l.RelayStatus(ctx)
	st.Replaced = replaced
	return st, err
}

// pinTx stores the pin checked by RelaySet and returns the fingerprint of the relay key it
// replaced ("" for none). info is the relay's, nil for a relay accepted as v1 (pin.RelayKey is
// then empty). Pinning the relay already pinned keeps what the host knows of it.
func (l *Link) pinTx(pin relayclient.Pin, fp string, req api.RelaySetRequest, info *mbx.InfoResponse) (string, error) {
	replaced := ""
	err := l.db.Update(func(tx *bbolt.Tx) error {
		replaced = ""
		old, err := LoadTx(tx)
		if err != nil {
			return err
		}
		if old != nil && old.URL == pin.URL && old.RelayKey == pin.RelayKey && old.V1 == (info == nil) {
			if old.KeyChange != nil || (fp != "" && old.TOFU) || old.CA != req.CA || old.TokenFile != req.TokenFile {
				old.KeyChange = nil
				old.TOFU = old.TOFU && fp == ""
				old.CA = req.CA
				if old.TokenFile != req.TokenFile {
					// Another token (or none) proves another account: enrol again with it.
					old.TokenFile, old.Enrolled = req.TokenFile, nil
				}
				return saveTx(tx, old)
			}
			return nil
		}
		if old != nil && old.RelayKey != "" && old.RelayKey != pin.RelayKey {
			replaced = mbx.Fingerprint(old.RelayKey)
		}
		rec := &Record{URL: pin.URL, RelayKey: pin.RelayKey, PinnedAt: mbx.ISOTime(l.clock()), CA: req.CA, TokenFile: req.TokenFile, V1: info == nil}
		if info != nil {
			lim := info.Limits
			rec.TOFU, rec.Published, rec.Epoch = fp == "", Published{Limits: &lim}, info.Epoch
		}
		return saveTx(tx, rec)
	})
	return replaced, err
}

// setV1 is RelaySet for a relay that answered 404 to its info (v1.go): refused with --key (a v1
// relay has no key to check) and without AllowV1; pinned as v1 otherwise.
func (l *Link) setV1(ctx context.Context, url, fp string, req api.RelaySetRequest) (api.RelayStatus, error) {
	switch {
	case fp != "":
		return api.RelayStatus{}, fmt.Errorf("host: relay set %s: %w", url, ErrRelayV1Key)
	case !req.AllowV1:
		return api.RelayStatus{}, fmt.Errorf("host: relay set %s: %w", url, ErrRelayV1Only)
	}
	return l.pin(ctx, relayclient.Pin{URL: url}, "", req, nil)
}

// RelayUnset forgets the pinned relay. Rows the relay accepted stay relay-accepted: their delivery
// receipts (over the LAN) still settle them, and their deadlines still stand.
func (l *Link) RelayUnset(ctx context.Context) (api.RelayStatus, error) {
	if err := ctx.Err(); err != nil {
		return api.RelayStatus{}, err
	}
	err := l.db.Update(func(tx *bbolt.Tx) error {
		s, err := LoadTx(tx)
		if err != nil {
			return err
		}
		if s == nil {
			return ErrNoRelay
		}
		return saveTx(tx, nil)
	})
	if err != nil {
		return api.RelayStatus{}, fmt.Errorf("host: relay unset: %w", err)
	}
	l.Drop()
	l.log.Info("relay unset")
	return l.RelayStatus(ctx)
}

// RelayStatus reports the pinned relay and what the host knows and did with it.
func (l *Link) RelayStatus(ctx context.Context) (api.RelayStatus, error) {
	if err := ctx.Err(); err != nil {
		return api.RelayStatus{}, err
	}
	var st api.RelayStatus
	err := l.db.View(func(tx *bbolt.Tx) error {
		n, err := l.quar.In(tx).Count()
		if err != nil {
			return err
		}
		st.Quarantined = n
		s, err := LoadTx(tx)
		if err != nil || s == nil {
			return err
		}
		return l.statusTx(tx, s, &st)
	})
	if err != nil {
		return api.RelayStatus{}, fmt.Errorf("host: relay status: %w", err)
	}
	st.Daemon = l.host.Daemon()
	return st, nil
}

// statusTx fills st with what the record s and the stores say of the pinned relay.
func (l *Link) statusTx(tx *bbolt.Tx, s *Record, st *api.RelayStatus) error {
	st.Configured, st.URL, st.RelayPubkey = true, s.URL, s.RelayKey
	if s.RelayKey != "" {
		st.Fingerprint = mbx.Fingerprint(s.RelayKey)
	}
	st.V1 = s.V1
	if s.V2 != nil {
		v2 := *s.V2
		st.V2 = &v2
	}
	st.PinnedAt, st.TOFU, st.Epoch, st.CA = s.PinnedAt, s.TOFU, s.Epoch, s.CA
	st.Account, st.Token = s.Account, tokenStatus(s.TokenFile, l.clock())
	if s.KeyChange != nil {
		st.Stopped = true
		kc := *s.KeyChange
		st.KeyChange = &kc
	}
	if s.enrolledFor(s.Epoch, l.key.PublicKey()) {
		st.Enrolled, st.EnrolledAt = true, s.Enrolled.At
	}
	if s.EncAd != nil {
		st.EncAdAt, st.EncAdExp = s.EncAd.At, s.EncAd.Exp
	}
	if s.Senders != nil {
		var err error
		st.SendersAt, st.Senders = s.Senders.At, s.Senders.Count
		if st.SendersCurrent, err = l.sendersCurrentTx(tx, s); err != nil {
			return err
		}
	}
	for _, p := range s.Problems {
		st.Problems = append(st.Problems, p)
	}
	slices.SortFunc(st.Problems, func(a, b api.RelayProblem) int { return strings.Compare(a.Op, b.Op) })
	pos, err := l.rpos.In(tx).Position(s.URL)
	if err != nil {
		return err
	}
	st.ReceivedThrough, st.PositionEpoch, st.Resets = pos.ReceivedThrough, pos.Epoch, pos.Resets
	rows, err := l.ob.In(tx).RelayAccepted(s.URL)
	st.RelayAccepted = len(rows)
	return err
}

// RelayQuarantine lists the relay items the host rejected, oldest relay position first.
func (l *Link) RelayQuarantine(ctx context.Context) ([]api.QuarantineItem, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var out []api.QuarantineItem
	err := l.db.View(func(tx *bbolt.Tx) error {
		es, err := l.quar.In(tx).List(quarantine.Filter{})
		if err != nil {
			return err
		}
		peers, err := l.host.Peers(tx)
		if err != nil {
			return err
		}
		out = make([]api.QuarantineItem, 0, len(es))
		for _, e := range es {
			it := api.QuarantineItem{ID: e.ID, Relay: e.Relay, Epoch: e.Epoch, Seq: e.Seq, ItemID: e.ItemID, Kind: e.Kind,
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

func isoOrEmpty(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return mbx.ISOTime(t)
}
