package relayserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/agentmbx/agentmbx/internal/logkey"
	"github.com/agentmbx/agentmbx/mbx"
)

// handleSenders is POST /v2/relay/senders {list, sig}: the caller publishes the allowlist of sender
// keys it accepts (docs/design.md: The relay store). A list with a later iat replaces the stored
// one.
func (s *Server) handleSenders(w http.ResponseWriter, r *http.Request) {
	var req mbx.SendersPublish
	caller, ok := s.signedJSON(w, r, s.opt.MaxSendersBody, &req)
	if !ok {
		return
	}
	now := s.opt.Clock()
	err := s.store.Update(r.Context(), func(tx Tx) error {
		var storedIAT = zeroTime
		if old, err := tx.SenderList(caller.HostPubkey); err == nil {
			storedIAT = old.IAT
		} else if !errors.Is(err, ErrNotFound) {
			return err
		}
		l, err := mbx.CheckSenderList(req.List, req.Sig, caller.HostPubkey, now, storedIAT)
		if errors.Is(err, mbx.ErrSendersStale) {
			return fmt.Errorf("%w: %w", ErrStaleRecord, err)
		}
		if err != nil {
			return err
		}
		return tx.PutSenderList(SenderList{TargetPubkey: caller.HostPubkey, Senders: l.UniqueSenders(),
			IAT: l.IATTime(), Record: req.List, Sig: req.Sig})
	})
	if err != nil {
		s.writeError(w, r, fmt.Errorf("senders: %w", err))
		return
	}
	s.writeJSON(w, http.StatusOK, mbx.OKResponse{OK: true})
}

// handlePublishEncKey is POST /v2/relay/enc-key with a v2 ad {ad, sig} or a v1 ad {enc_pub, sig}
// (and POST /v1/relay/enc-key). A v1 ad for the key a stored v2 ad names is kept beside it; any
// other publication replaces what is stored.
func (s *Server) handlePublishEncKey(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Ad     json.RawMessage `json:"ad"`
		Sig    string          `json:"sig"`
		EncPub string          `json:"enc_pub"`
	}
	caller, ok := s.signedJSON(w, r, s.opt.MaxSmallBody, &req)
	if !ok {
		return
	}
	now := s.opt.Clock()
	peer := mbx.EncAdPeer{Host: caller.HostName, HostPubkey: caller.HostPubkey}
	var ad EncAd
	switch {
	case len(req.Ad) > 0 && string(req.Ad) != "null":
		a, err := mbx.CheckEncAd(req.Ad, req.Sig, peer, now)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		ad = EncAd{HostPubkey: caller.HostPubkey, EncPub: a.EncPub, Ad: req.Ad, AdSig: req.Sig, At: now}
	case req.EncPub != "":
		if err := mbx.RelayCheckEncAdV1(peer, caller.HostName, req.EncPub, req.Sig); err != nil {
			s.writeError(w, r, err)
			return
		}
		ad = EncAd{HostPubkey: caller.HostPubkey, EncPub: req.EncPub, V1Sig: req.Sig, At: now}
	default:
		s.writeError(w, r, fmt.Errorf("%w: expected {ad, sig} or {enc_pub, sig}", ErrBadRequest))
		return
	}
	err := s.store.Update(r.Context(), func(tx Tx) error {
		old, err := tx.EncAd(caller.HostPubkey)
		if err != nil && !errors.Is(err, ErrNotFound) {
			return err
		}
		if err == nil && old.EncPub == ad.EncPub {
			// Same key: keep what the other version said about it.
			if ad.Ad == nil {
				ad.Ad, ad.AdSig = old.Ad, old.AdSig
			} else if ad.V1Sig == "" {
				ad.V1Sig = old.V1Sig
			}
		}
		return tx.PutEncAd(ad)
	})
	if err != nil {
		s.writeError(w, r, fmt.Errorf("enc-key: %w", err))
		return
	}
	s.writeJSON(w, http.StatusOK, mbx.OKResponse{OK: true})
}

// encAnswer is the GET enc-key answer for a stored ad: the v1 fields when a v1 ad was published,
// and the v2 ad with its signature when one was.
func encAnswer(e Enrolment, ad EncAd) mbx.EncKeyAnswer {
	a := mbx.EncKeyAnswer{Host: e.HostName, HostPubkey: e.HostPubkey}
	encPub := ad.EncPub
	a.EncPub = &encPub
	if ad.V1Sig != "" {
		sig := ad.V1Sig
		a.Sig = &sig
	}
	if len(ad.Ad) > 0 {
		a.Ad = json.RawMessage(ad.Ad)
		sig := ad.AdSig
		a.AdSig = &sig
	}
	return a
}

// handleGetEncKey is GET /v2/relay/enc-key?pubkey= (by key) and GET /v1/relay/enc-key?host= (by
// name, only when exactly one live enrolment carries it). Ads are signed and public: no hop.
func (s *Server) handleGetEncKey(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var e Enrolment
	switch {
	case q.Get("pubkey") != "":
		pub := q.Get("pubkey")
		if !mbx.ValidPublicKey(pub) {
			s.writeError(w, r, fmt.Errorf("%w: pubkey is not a host key", ErrBadRequest))
			return
		}
		var err error
		if e, err = s.store.Enrolment(r.Context(), pub); err != nil || !e.Live() {
			s.writeError(w, r, fmt.Errorf("enc-key: host key: %w", ErrNotFound))
			return
		}
	case q.Get("host") != "":
		es, err := s.store.EnrolmentsByName(r.Context(), q.Get("host"), 2)
		if err != nil {
			s.writeError(w, r, fmt.Errorf("enc-key: %w", err))
			return
		}
		if len(es) != 1 {
			// None, or ambiguous: a name alone never picks one host's key among several.
			s.writeError(w, r, fmt.Errorf("enc-key: host name not found or ambiguous: %w", ErrNotFound))
			return
		}
		e = es[0]
	default:
		s.writeError(w, r, fmt.Errorf("%w: pubkey is required", ErrBadRequest))
		return
	}
	ad, err := s.store.EncAd(r.Context(), e.HostPubkey)
	if err != nil {
		s.writeError(w, r, fmt.Errorf("enc-key: %w", err))
		return
	}
	s.writeJSON(w, http.StatusOK, encAnswer(e, ad))
}

// handleRotate is POST /v2/relay/rotate {rotation} (docs/design.md: Host key rotation). It needs no
// hop: both the old and the new key signed the record. The old key must be one the relay enrolled.
func (s *Server) handleRotate(w http.ResponseWriter, r *http.Request) {
	var req mbx.RotateRequest
	if !s.publicJSON(w, r, &req) {
		return
	}
	oldPub := mbx.RotationOldPub(req.Rotation)
	if oldPub == "" {
		s.writeError(w, r, fmt.Errorf("%w: not a rotation record", ErrBadRequest))
		return
	}
	old, err := s.store.Enrolment(r.Context(), oldPub)
	if err != nil {
		s.writeError(w, r, fmt.Errorf("rotate: old key: %w", err))
		return
	}
	rot, err := mbx.RelayCheckRotation(req.Rotation, old.HostName, old.HostPubkey)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if d, ok := s.deniedBy(old.HostPubkey, old.ClientID); ok {
		s.writeError(w, r, fmt.Errorf("rotate: %w: the old key is on the relay's deny list (%s)", ErrDenied, d))
		return
	}
	if d, ok := s.deniedBy(rot.Rec.NewPub, ""); ok {
		s.writeError(w, r, fmt.Errorf("rotate: %w: the new key is on the relay's deny list (%s)", ErrDenied, d))
		return
	}
	// A rotation to a key the relay does not know makes a new key, as an enrolment does: it
	// counts against the client address's new keys of the day, so rotating escapes that limit no
	// more than enrolling does (issue 25, finding 5).
	now := s.opt.Clock()
	addr := clientKeys(r, s.opt.TrustProxy)
	_, err = s.store.Enrolment(r.Context(), rot.Rec.NewPub)
	newKey := errors.Is(err, ErrNotFound)
	if err != nil && !newKey {
		s.writeError(w, r, fmt.Errorf("rotate: new key: %w", err))
		return
	}
	if newKey && old.Live() && !s.newEnrolR.hasRoom(addr, now) {
		s.writeError(w, r, fmt.Errorf("rotate: %w: new host keys from this address today", ErrRateLimited))
		return
	}
	var res RotateResult
	// Waited for even when the client goes away: a committed rotation must wake the held pulls.
	err = s.store.Update(context.WithoutCancel(r.Context()), func(tx Tx) error {
		var err error
		res, err = tx.Rotate(Rotation{OldPubkey: rot.Rec.OldPub, NewPubkey: rot.Rec.NewPub,
			HostName: rot.Rec.Host, At: now})
		return err
	})
	if err != nil {
		s.writeError(w, r, fmt.Errorf("rotate: %w", err))
		return
	}
	if newKey && old.Live() {
		s.newEnrolR.allowAll(addr, now) // counted once committed, as an enrolment is
	}
	// The new key pushes in the old key's bucket: a rotation mints no fresh rate.
	s.pushR.inherit(rot.Rec.OldPub, rot.Rec.NewPub, now)
	s.cap.free() // repeats may have been dropped
	// Committed: the new key's queue may have grown, and the old key's pulls learn it is revoked.
	s.polls.wake(rot.Rec.NewPub)
	s.polls.wake(rot.Rec.OldPub)
	s.log.Info("host key rotated",
		logkey.Old, mbx.Fingerprint(rot.Rec.OldPub), logkey.New, mbx.Fingerprint(rot.Rec.NewPub),
		logkey.Moved, res.MovedItems)
	s.writeJSON(w, http.StatusOK, mbx.RotateResponse{Moved: res.MovedItems})
}
