package doctor

import (
	"fmt"
	"strings"

	"github.com/agentmbx/agentmbx/api"
)

// checkRotation: this host's last key rotation is done, or what is left of it.
func checkRotation(env Env, st api.Status, r *Report) {
	rot := st.Rotation
	if rot == nil {
		return
	}
	c := Check{ID: "rotation"}
	if rot.Done != "" {
		c.Status, c.Summary = OK, fmt.Sprintf("host key rotated %s (was %s)", rot.Done, rot.OldFingerprint)
		r.add(c)
		return
	}
	c.Status = Warn
	c.Summary = fmt.Sprintf("host key rotation %s → %s not done yet", rot.OldFingerprint, rot.NewFingerprint)
	var left []string
	if rel := rot.Relay; rel != nil && rel.Checked == "" {
		s := "relay " + rel.URL + ": steps left"
		if rel.LastError != "" {
			s += " (last error: " + rel.LastError + ")"
		}
		left = append(left, s)
	}
	for _, p := range rot.Peers {
		if p.LAN == "" && p.Notice != "accepted" && p.Notice != "duplicate" {
			s := "peer " + p.Host + " not told yet"
			if p.LastError != "" {
				s += " (last error: " + p.LastError + ")"
			}
			left = append(left, s)
		}
	}
	c.Detail = strings.Join(left, "\n")
	if !st.Daemon {
		c.Detail += "\nthe daemon retries the steps left until they are done"
		c.Fix = env.command("daemon")
	}
	r.add(c)
}

// peerRotationDetail adds to a peer's check that it rotated its host key.
func peerRotationDetail(c *Check, p api.Peer) {
	if p.RotatedAt == "" {
		return
	}
	s := fmt.Sprintf("rotated its host key %s; retired keys (still valid for what they signed): %s",
		p.RotatedAt, strings.Join(p.RetiredFingerprints, ", "))
	if c.Detail != "" {
		s = c.Detail + "\n" + s
	}
	c.Detail = s
}
