package rotation

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/agentmbx/agentmbx/internal/failpoint"
	"github.com/agentmbx/agentmbx/lan"
)

// rotateLAN sends the record (POST /v1/rotate) to every peer with a LAN address that has not
// answered it yet.
func (r *Rotation) rotateLAN(ctx context.Context, st *State) error {
	peers, err := r.peers()
	if err != nil {
		return err
	}
	signed, err := json.Marshal(st.Signed)
	if err != nil {
		return err
	}
	var first error
	for _, p := range peers {
		pr := st.Peers[p.Host]
		if pr == nil || pr.LAN != "" || p.Addr == "" {
			continue
		}
		lctx, cancel := context.WithTimeout(ctx, stepBudget)
		applied, err := lan.PostRotation(lctx, r.c.LAN, p.Addr, signed)
		cancel()
		outcome := ""
		switch {
		case err == nil && applied:
			outcome = "applied"
		case err == nil:
			outcome = "had it"
		case errors.Is(err, lan.ErrRotationNotTaken):
			outcome = "refused: " + clip(err.Error(), 200)
		}
		if outcome != "" {
			if ferr := failpoint.Inject(FailLANSent); ferr != nil {
				return ferr
			}
		}
		r.note(func(st *State) {
			q := st.Peers[p.Host]
			if q == nil {
				return
			}
			if outcome != "" {
				q.LAN = outcome
				return
			}
			q.Attempts++
			q.LastError = clip(err.Error(), 300)
		})
		if outcome == "" && first == nil && !pr.Noticed() {
			first = fmt.Errorf("LAN rotation to %s: %w", p.Host, err)
		}
	}
	return first
}
