package relayserver

import (
	"context"
	"time"
)

// AuthRequest is what an enrolment authority decides on. The host has already proved, by signing
// the relay's challenge, that it holds HostPubkey.
type AuthRequest struct {
	HostName   string
	HostPubkey string
	// OwnerFP is the host's unproven claim; an authority must not grant anything for it.
	OwnerFP string
	// Proof is the enrol body's optional proof (an account token, for instance), as received.
	Proof string
}

// AuthDecision is an authority's answer. Account and Org are what it proved; they are stored on
// the enrolment, and quotas and name uniqueness use the account.
type AuthDecision struct {
	OK      bool
	Account string
	Org     string
	// ClientID is the client the proof came from (an account token's client_id), "" for none.
	ClientID string
	// Reason says why a host was refused; it is shown to the host.
	Reason string
	// By is the authority that decided when a composite authority delegated (a token authority
	// that lets a host without a token use the host-key challenge); nil means the one asked.
	// Its Name and Rank are stored on the enrolment.
	By EnrolmentAuthority
	// Until is when what was proved ends (an account token's exp); zero: never. Past it the
	// enrolment falls back to host-key rights, and on a relay that requires proof its hops are
	// refused until the host enrols again with a fresh proof.
	Until time.Time
}

// ProofRequirer is implemented by an authority that admits no host without a proof (a token
// authority with --auth-required): host-key rights are then none, so an enrolment whose proof
// expired is refused until it enrols again with a fresh one.
type ProofRequirer interface {
	ProofRequired() bool
}

// EnrolmentAuthority decides whether a host key may enrol (docs/design.md: Enrolment and
// publications). The relay asks it after the challenge signature verified; a denial stores nothing.
type EnrolmentAuthority interface {
	// Name is stored on the enrolment as authorized_by.
	Name() string
	// Rank orders authorities by strength: an enrolment recorded by a higher rank keeps its
	// account and authorized_by when a lower-ranked authority re-enrols the same key.
	Rank() int
	// Authorize decides on one request.
	Authorize(ctx context.Context, req AuthRequest) (AuthDecision, error)
}

// HostKeyAuthority is the default authority of a self-hosted relay: a host that signed the
// challenge with its key may enrol. It proves no account.
type HostKeyAuthority struct{}

// Name implements EnrolmentAuthority.
func (HostKeyAuthority) Name() string { return "host-key" }

// Rank implements EnrolmentAuthority: the weakest.
func (HostKeyAuthority) Rank() int { return 0 }

// Authorize implements EnrolmentAuthority.
func (HostKeyAuthority) Authorize(context.Context, AuthRequest) (AuthDecision, error) {
	return AuthDecision{OK: true}, nil
}
