package relayserver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/agentmbx/agentmbx/internal/logkey"
	"github.com/agentmbx/agentmbx/mbx"
)

var zeroTime time.Time

// handleChallenge is POST /v1/relay/challenge {host, pubkey} → {challenge}.
func (s *Server) handleChallenge(w http.ResponseWriter, r *http.Request) {
	var req mbx.ChallengeRequest
	if !s.publicJSON(w, r, &req) {
		return
	}
	if err := mbx.CheckChallengeRequest(req); err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, http.StatusOK, mbx.ChallengeResponse{Challenge: s.chal.issue(req.Pubkey, s.opt.Clock())})
}

// checkEnrolment checks the signature of an enrolment against the challenges open for its key.
// Nothing is consumed: a replay within the challenge's life repeats the same enrolment.
func (s *Server) checkEnrolment(req mbx.EnrolRequest, now time.Time) error {
	if err := mbx.CheckEnrolment(req, "-"); errors.Is(err, mbx.ErrEnrolFields) {
		return err
	}
	for _, c := range s.chal.open(req.Pubkey, now) {
		if mbx.CheckEnrolment(req, c) == nil {
			return nil
		}
	}
	return fmt.Errorf("%w: the signature covers no challenge this relay has open for the key (ask for a new one)",
		mbx.ErrEnrolNoChallenge)
}

// handleEnrol is POST /v1/relay/enrol {host, pubkey, owner_fp, sig, proof?} (docs/design.md: The
// relay store, Enrolment and publications).
func (s *Server) handleEnrol(w http.ResponseWriter, r *http.Request) {
	var req mbx.EnrolRequest
	if !s.publicJSON(w, r, &req) {
		return
	}
	now := s.opt.Clock()
	if err := s.checkEnrolment(req, now); err != nil {
		s.writeError(w, r, err)
		return
	}
	if d, ok := s.deniedBy(req.Pubkey, ""); ok {
		s.writeError(w, r, fmt.Errorf("%w: this host key is on the relay's deny list (%s)", ErrDenied, d))
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
	if d, ok := s.deniedBy("", dec.ClientID); ok {
		s.writeError(w, r, fmt.Errorf("%w: this client is on the relay's deny list (%s)", ErrDenied, d))
		return
	}
	if dec.By != nil {
		auth = dec.By
	}
	addr := clientKeys(r, s.opt.TrustProxy)
	isNew := false
	var e Enrolment
	err = s.store.Update(r.Context(), func(tx Tx) error {
		e = Enrolment{HostPubkey: req.Pubkey, HostName: req.Host, OwnerFP: req.OwnerFP,
			Account: dec.Account, Org: dec.Org, ClientID: dec.ClientID, AuthorizedBy: auth.Name(), AuthorityRank: auth.Rank(),
			EnrolledAt: now, AuthUntil: dec.Until}
		old, err := tx.Enrolment(req.Pubkey)
		if err == nil && e.ClientID == "" {
			// The client_id a token once proved for this key stays on it until a token proves
			// another: the deny list must still find the key after a host-key re-enrolment.
			e.ClientID = old.ClientID
		}
		// Checked again inside the unit, against the list as it is now: ReloadDeny publishes an
		// entry before it revokes, so a unit that runs after the revocation sees the entry, and
		// one that runs before it is revoked by it (the client_id above keeps it matching).
		if err := s.refuseDenied(e); err != nil {
			return err
		}
		switch {
		case errors.Is(err, ErrNotFound):
			if !s.newEnrolR.hasRoom(addr, now) {
				return fmt.Errorf("%w: new enrolments from this address today", ErrRateLimited)
			}
			isNew = true
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
			if old.AuthorityRank > e.AuthorityRank && old.DeniedAt.IsZero() && !old.AuthExpired(now) {
				// A weaker authority never overwrites what a stronger one recorded (unless the
				// deny list revoked that grant, or its proof expired: then the new authority's
				// word is all there is).
				e.Account, e.Org, e.ClientID = old.Account, old.Org, old.ClientID
				e.AuthorizedBy, e.AuthorityRank, e.AuthUntil = old.AuthorizedBy, old.AuthorityRank, old.AuthUntil
			}
		}
		return tx.PutEnrolment(e)
	})
	if err != nil {
		s.writeError(w, r, fmt.Errorf("enrol: %w", err))
		return
	}
	// An entry another replica added may have been published here while the unit ran: apply it
	// to what was just written, as ReloadDeny would have.
	if err := s.refuseDenied(e); err != nil {
		s.reapplyDeny(r.Context(), e)
		s.writeError(w, r, fmt.Errorf("enrol: %w", err))
		return
	}
	if isNew {
		// Counted once committed; racing enrolments of one address may pass the day's limit by
		// the few that were in flight together.
		s.newEnrolR.allowAll(addr, now)
	}
	s.log.Info("host enrolled",
		logkey.Req, RequestID(r.Context()), logkey.Host, req.Host,
		logkey.Key, mbx.Fingerprint(req.Pubkey), logkey.By, auth.Name())
	s.writeJSON(w, http.StatusOK, mbx.OKResponse{OK: true})
}

// refuseDenied is the refusal of an enrolment the deny list matches, by its host key or by the
// client_id it carries (proved now, or recorded before), or nil.
func (s *Server) refuseDenied(e Enrolment) error {
	if d, ok := s.deniedBy(e.HostPubkey, ""); ok {
		return fmt.Errorf("%w: this host key is on the relay's deny list (%s)", ErrDenied, d)
	}
	if d, ok := s.deniedBy("", e.ClientID); ok {
		return fmt.Errorf("%w: this client is on the relay's deny list (%s)", ErrDenied, d)
	}
	return nil
}

// reapplyDeny revokes e's enrolment by the active entries matching it (Tx.DenyRevoke changes
// nothing where they were applied already). A failure is logged: the entry is applied on the
// next reload of a replica that has not applied it, and the hop checks refuse nothing less.
func (s *Server) reapplyDeny(ctx context.Context, e Enrolment) {
	p := s.deny.active.Load()
	if p == nil {
		return
	}
	now := s.opt.Clock()
	err := s.store.Update(context.WithoutCancel(ctx), func(tx Tx) error {
		for _, d := range *p {
			if d.Active(now) && d.Matches(e.HostPubkey, e.ClientID) {
				if _, err := tx.DenyRevoke(d, now); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		s.log.Warn("applying the deny list to an enrolment failed", logkey.Key, mbx.Fingerprint(e.HostPubkey), logkey.Err, err)
		return
	}
	s.polls.wake(e.HostPubkey)
}
