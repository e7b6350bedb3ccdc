package relayserver

import (
	"errors"
	"fmt"
)

// PlanRotation applies the enrolment rules of Tx.Rotate for a backend: it reads both keys through
// tx and returns the enrolment the new key gets once the old key is revoked at r.At. retried
// reports a rotation already applied, which changes nothing. It fails with ErrNotFound for an
// unknown old key and ErrRevoked for a revoked new key, or a revoked old key that is not a retry.
func PlanRotation(tx Tx, r Rotation) (nw Enrolment, retried bool, err error) {
	old, err := tx.Enrolment(r.OldPubkey)
	if err != nil {
		return nw, false, fmt.Errorf("rotate: old key: %w", err)
	}
	if !old.DeniedAt.IsZero() {
		// The deny list revoked the old enrolment: a rotation must not carry it out of the entry.
		return nw, false, fmt.Errorf("rotate: old key: %w: revoked by the relay's deny list", ErrDenied)
	}
	nw, err = tx.Enrolment(r.NewPubkey)
	switch {
	case errors.Is(err, ErrNotFound):
		nw = Enrolment{HostPubkey: r.NewPubkey, EnrolledAt: r.At}
	case err != nil:
		return nw, false, fmt.Errorf("rotate: new key: %w", err)
	case !nw.Live():
		return nw, false, fmt.Errorf("rotate: new key: %w", ErrRevoked)
	}
	if !old.Live() {
		if nw.HostName != "" && nw.Live() {
			return nw, true, nil
		}
		return nw, false, fmt.Errorf("rotate: old key: %w", ErrRevoked)
	}
	nw.HostName = r.HostName
	if nw.HostName == "" {
		nw.HostName = old.HostName
	}
	nw.OwnerFP = old.OwnerFP
	if old.AuthorityRank >= nw.AuthorityRank {
		// The proof's end moves with what it proved: a rotation never extends account rights.
		nw.Account, nw.Org, nw.AuthorizedBy, nw.AuthorityRank = old.Account, old.Org, old.AuthorizedBy, old.AuthorityRank
		nw.ClientID, nw.AuthUntil = old.ClientID, old.AuthUntil
	}
	return nw, false, nil
}
