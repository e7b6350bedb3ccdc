package relayclient

import (
	"context"
	"fmt"

	"github.com/agentmbx/agentmbx/mbx"
)

// Enrol enrols this host key at the relay: it asks for a challenge and answers it signed with the
// host key (docs/design.md: Enrolment and publications). ownerFP is the host's unproven owner claim
// ("" for none); proof a credential for a stronger enrolment authority ("" for the host-key
// challenge). Enrolling an enrolled key again is harmless, so a caller enrols whenever the relay
// answers ErrNotEnrolled or its epoch changed, then republishes its enc-key ad and sender list.
func (c *Client) Enrol(ctx context.Context, ownerFP, proof string) error {
	return enrol(ctx, c.do, c.host, c.key, ownerFP, proof)
}

// enrol is the challenge and answer of Enrol over do (a v2 or a v1 client's).
func enrol(ctx context.Context, do func(context.Context, request) (answer, error), host string, key mbx.SigningKey, ownerFP, proof string) error {
	pub := key.PublicKey()
	if err := mbx.CheckChallengeRequest(mbx.ChallengeRequest{Host: host, Pubkey: pub}); err != nil {
		return fmt.Errorf("relayclient: enrol: %w: %w", ErrInvalid, err)
	}
	body, err := mbx.MarshalJSON(mbx.ChallengeRequest{Host: host, Pubkey: pub})
	if err != nil {
		return fmt.Errorf("relayclient: enrol: %w", err)
	}
	a, err := do(ctx, request{op: "challenge", method: "POST", path: "/v1/relay/challenge", body: body, retry: true, max: maxSmallAnswer})
	if err != nil {
		return err
	}
	var ch mbx.ChallengeResponse
	if err := decode("challenge", a, &ch); err != nil {
		return err
	}
	if ch.Challenge == "" || len(ch.Challenge) > 256 {
		return fmt.Errorf("relayclient: challenge: %w: no usable challenge", ErrProtocol)
	}
	req, err := mbx.SignEnrolment(key, host, ch.Challenge, ownerFP)
	if err != nil {
		return fmt.Errorf("relayclient: enrol: %w: %w", ErrInvalid, err)
	}
	req.Proof = proof
	body, err = mbx.MarshalJSON(req)
	if err != nil {
		return fmt.Errorf("relayclient: enrol: %w", err)
	}
	a, err = do(ctx, request{op: "enrol", method: "POST", path: "/v1/relay/enrol", body: body, retry: true, max: maxSmallAnswer})
	if err != nil {
		return err
	}
	return expectOK("enrol", a)
}
