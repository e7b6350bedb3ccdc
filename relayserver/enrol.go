package relayserver

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/agentmbx/agentmbx/mbx"
)

var zeroTime time.Time

// handleChallenge is POST /v1/relay/challenge {host, pubkey} → {challenge}.
func (s *Server) handleChallenge(w http.ResponseWriter, r *http.Request) {
	var req mbx.ChallengeRequest
	if !s.publicJSON(w, r, &req) {
		return
	}
	now := s.opt.Clock()
	if err := mbx.CheckChallengeRequest(req); err != nil {
		s.writeError(w, r, err)
		return
	}
	c, err := s.chal.issue(req.Pubkey, now, s.opt.Rand)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, http.StatusOK, mbx.ChallengeResponse{Challenge: c})
}

// handleEnrol is POST /v1/relay/enrol {host, pubkey, owner_fp, sig, proof?} (spec §2, §8).
func (s *Server) handleEnrol(w http.ResponseWriter, r *http.Request) {
	var req mbx.EnrolRequest
	if !s.publicJSON(w, r, &req) {
		return
	}
	now := s.opt.Clock()
	pending := ""
	if mbx.ValidPublicKey(req.Pubkey) {
		pending, _ = s.chal.take(req.Pubkey, now)
	}
	if err := mbx.CheckEnrolment(req, pending); err != nil {
		s.writeError(w, r, err)
		return
	}
	auth := s.opt.Authority
	dec, err := auth.Authorize(r.Context(), AuthRequest{HostName: req.Host, HostPubkey: req.Pubkey, OwnerFP: req.OwnerFP, Proof: req.Proof})
	if err != nil {
		s.writeError(w, r, fmt.Errorf("enrol: authority %s: %w", auth.Name(), err))
		return
	}
	if !dec.OK {
		reason := dec.Reason
		if reason == "" {
			reason = "refused by " + auth.Name()
		}
		s.writeError(w, r, fmt.Errorf("%w: %s", ErrDenied, reason))
		return
	}
	err = s.store.Update(r.Context(), func(tx Tx) error {
		e := Enrolment{HostPubkey: req.Pubkey, HostName: req.Host, OwnerFP: req.OwnerFP,
			Account: dec.Account, Org: dec.Org, AuthorizedBy: auth.Name(), AuthorityRank: auth.Rank(), EnrolledAt: now}
		old, err := tx.Enrolment(req.Pubkey)
		switch {
		case errors.Is(err, ErrNotFound):
			live, err := tx.LiveEnrolments()
			if err != nil {
				return err
			}
			if live >= s.opt.MaxEnrolments {
				return ErrRelayFull
			}
		case err != nil:
			return err
		case !old.Live():
			return fmt.Errorf("host key %s: %w", mbx.Fingerprint(req.Pubkey), ErrRevoked)
		default:
			e.EnrolledAt = old.EnrolledAt
			if old.AuthorityRank > e.AuthorityRank {
				// A weaker authority never overwrites what a stronger one recorded.
				e.Account, e.Org, e.AuthorizedBy, e.AuthorityRank = old.Account, old.Org, old.AuthorizedBy, old.AuthorityRank
			}
		}
		return tx.PutEnrolment(e)
	})
	if err != nil {
		s.writeError(w, r, fmt.Errorf("enrol: %w", err))
		return
	}
	s.log.Info("host enrolled", "host", req.Host, "key", mbx.Fingerprint(req.Pubkey), "by", auth.Name())
	s.writeJSON(w, http.StatusOK, mbx.OKResponse{OK: true})
}
