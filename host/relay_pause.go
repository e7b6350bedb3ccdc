package host

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"go.etcd.io/bbolt"

	"github.com/agentmbx/agentmbx/internal/logkey"
	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/outbox"
	"github.com/agentmbx/agentmbx/relayclient"
)

// Pausing the relay link. A relay that answers a push with 429, or 503 with a Retry-After, or
// refuses items with rejected:rate, speaks about the link, not about the rows: the whole link
// pauses (until the Retry-After, else for relayRatePause), and the rows it refused, and any row
// due for the relay while the pause lasts, move to its end without an attempt counted, so their
// attempt counts and backoff stay as they were. Their last_error says why they wait.

const (
	// relayRatePause is the pause after a 429 or a rate refusal that names no Retry-After.
	relayRatePause = 10 * time.Second
	// maxRelayPause caps a relay's Retry-After.
	maxRelayPause = 15 * time.Minute
)

// linkRefusal reports whether o is the relay refusing for the link (not the row), and the pause
// it asks for.
func linkRefusal(o outbox.Outcome) (time.Duration, bool) {
	switch o.Kind {
	case outbox.OutcomeRejected:
		if o.Err != nil && strings.HasSuffix(o.Err.Error(), mbx.StatusRejectedPrefix+"rate") {
			return relayRatePause, true
		}
	case outbox.OutcomeFailed:
		var se *relayclient.StatusError
		if errors.As(o.Err, &se) && (se.Status == http.StatusTooManyRequests ||
			(se.Status == http.StatusServiceUnavailable && se.RetryAfter > 0)) {
			if se.RetryAfter > 0 {
				return min(se.RetryAfter, maxRelayPause), true
			}
			return relayRatePause, true
		}
	}
	return 0, false
}

// pauseRelay keeps pushes off the relay for d from now (a longer pause already set stands) and
// returns when the pause ends.
func (h *Host) pauseRelay(d time.Duration) time.Time {
	until := h.clock().Add(d)
	h.rl.mu.Lock()
	if until.After(h.rl.pausedUntil) {
		h.rl.pausedUntil = until
	} else {
		until = h.rl.pausedUntil
	}
	h.rl.mu.Unlock()
	return until
}

// relayPaused returns the end of the relay link's pause, if one lasts at now.
func (h *Host) relayPaused(now time.Time) (time.Time, bool) {
	h.rl.mu.Lock()
	defer h.rl.mu.Unlock()
	return h.rl.pausedUntil, now.Before(h.rl.pausedUntil)
}

// holdRefused takes the rows the relay refused for the link out of an attempt's outcomes: it
// pauses the link and postpones them to the pause's end. It returns the rows and outcomes left to
// record, and false when postponing failed (the refused rows then stay due).
func (h *Host) holdRefused(ctx context.Context, rows []outbox.Row, out []outbox.Outcome) ([]outbox.Row, []outbox.Outcome, bool) {
	var pause time.Duration
	var keepRows, held []outbox.Row
	var keepOut []outbox.Outcome
	for i, o := range out {
		if d, ok := linkRefusal(o); ok {
			pause = max(pause, d)
			held = append(held, rows[i])
			continue
		}
		keepRows, keepOut = append(keepRows, rows[i]), append(keepOut, o)
	}
	if len(held) == 0 {
		return rows, out, true
	}
	until := h.pauseRelay(pause)
	h.log.Warn("relay asks to slow down: relay link paused", logkey.RetryIn, pause.String(), logkey.Count, len(held))
	return keepRows, keepOut, h.postpone(ctx, held, until)
}

// postpone moves rows due for the relay to the end of its pause, counting no attempt.
func (h *Host) postpone(ctx context.Context, rows []outbox.Row, until time.Time) bool {
	note := fmt.Sprintf("relay link paused until %s (the relay asked to slow down)", until.UTC().Format(time.RFC3339))
	err := h.db.Update(func(tx *bbolt.Tx) error {
		ob := h.ob.In(tx)
		for _, r := range rows {
			_, err := ob.Postpone(r.Key(), until, note)
			if errors.Is(err, outbox.ErrTransition) || errors.Is(err, outbox.ErrNotFound) {
				continue // settled or swept meanwhile
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		h.log.Error("postponing outbox rows for the relay pause", logkey.Err, err)
		return false
	}
	return ctx.Err() == nil
}
