package mbx

import (
	"encoding/base64"
	"fmt"
	"io"
	"regexp"
)

// ChallengeRequest is the body of POST /v1/relay/challenge.
type ChallengeRequest struct {
	Host   string `json:"host"`
	Pubkey string `json:"pubkey"`
}

// ChallengeResponse is the relay's answer: a single-use challenge for that key.
type ChallengeResponse struct {
	Challenge string `json:"challenge"`
}

// EnrolRequest is the body of POST /v1/relay/enrol. OwnerFP is the host's own, unproven claim
// about its owner ("" for none); Proof is an optional credential for a stronger enrolment
// authority (an account token).
type EnrolRequest struct {
	Host    string `json:"host"`
	Pubkey  string `json:"pubkey"`
	OwnerFP string `json:"owner_fp"`
	Sig     string `json:"sig"`
	Proof   string `json:"proof,omitempty"`
}

var ownerFPRE = regexp.MustCompile(`^[A-Za-z0-9._-]{0,64}$`)

// validHostName reports whether s is a host name: ^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$.
func validHostName(s string) bool { return recHostRE.MatchString(s) }

// NewChallenge returns a fresh enrolment challenge: 16 bytes from r in base64url without padding.
func NewChallenge(r io.Reader) (string, error) {
	var b [16]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return "", fmt.Errorf("new challenge: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// EnrolSigningInput is what an enrolling host signs: canonical({v:1, challenge, host, pubkey,
// owner_fp}).
func EnrolSigningInput(challenge, host, pubkey, ownerFP string) ([]byte, error) {
	return Canonical(map[string]any{"v": 1, "challenge": challenge, "host": host, "pubkey": pubkey, "owner_fp": ownerFP})
}

// SignEnrolment answers a challenge: the enrolment request of host (key k) claiming owner ownerFP.
func SignEnrolment(k SigningKey, host, challenge, ownerFP string) (EnrolRequest, error) {
	in, err := EnrolSigningInput(challenge, host, k.PublicKey(), ownerFP)
	if err != nil {
		return EnrolRequest{}, fmt.Errorf("sign enrolment: %w", err)
	}
	return EnrolRequest{Host: host, Pubkey: k.PublicKey(), OwnerFP: ownerFP, Sig: k.Sign(in)}, nil
}

// CheckChallengeRequest is the relay's check before it issues a challenge: a valid host name
// (ErrEnrolHostName) and a 32-byte key (ErrEnrolHostKey).
func CheckChallengeRequest(req ChallengeRequest) error {
	if !validHostName(req.Host) {
		return ErrEnrolHostName
	}
	if !ValidPublicKey(req.Pubkey) {
		return ErrEnrolHostKey
	}
	return nil
}

// CheckEnrolment is the relay's check of an enrolment against the challenge pending for its key
// ("" when none is pending or it expired): the host name, key and owner_fp are well formed
// (ErrEnrolFields), a challenge is pending (ErrEnrolNoChallenge), and the key signed the challenge
// with exactly these fields (ErrEnrolSignature). The challenge is single-use: the relay drops it
// once the enrolment succeeds.
func CheckEnrolment(req EnrolRequest, pending string) error {
	if !validHostName(req.Host) || !ValidPublicKey(req.Pubkey) || !ownerFPRE.MatchString(req.OwnerFP) {
		return ErrEnrolFields
	}
	if pending == "" {
		return ErrEnrolNoChallenge
	}
	in, err := EnrolSigningInput(pending, req.Host, req.Pubkey, req.OwnerFP)
	if err != nil || req.Sig == "" || !Verify(req.Pubkey, in, req.Sig) {
		return ErrEnrolSignature
	}
	return nil
}
