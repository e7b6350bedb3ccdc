package relaylink

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/bbolt"

	"github.com/agentmbx/agentmbx/internal/logkey"
	"github.com/agentmbx/agentmbx/outbox"
)

// Pausing the relay link. A relay that answers a push with 429, or 503 with a Retry-After, or
// refuses items with rejected:rate, speaks about the link, not about the rows: the whole link
// pauses (until the Retry-After, else for RatePause), and the rows it refused, and any row
// due for the relay while the pause lasts, move to its end without an attempt counted, so their
// attempt counts and backoff stay as they were. Their last_error says why they wait. LinkRefusal
// (pace.go) tells a link refusal from a row's.

// pause keeps pushes off the relay for d from now (a longer pause already set stands) and
// returns when the pause ends.
func (l *Link) pause(d time.Duration) time.Time {
	until := l.clock().Add(d)
	l.mu.Lock()
	if until.After(l.pausedUntil) {
		l.pausedUntil = until
	} else {
		until = l.pausedUntil
	}
	l.mu.Unlock()
	return until
}

// Paused returns the end of the relay link's pause, if one lasts at now.
func (l *Link) Paused(now time.Time) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.pausedUntil, now.Before(l.pausedUntil)
}

// HoldRefused takes the rows the relay refused for the link out of an attempt's outcomes: it
// pauses the link and postpones them to the pause's end. It returns the rows and outcomes left to
// record, and false when postponing failed (the refused rows then stay due).
func (l *Link) HoldRefused(ctx context.Context, rows []outbox.Row, out []outbox.Outcome) ([]outbox.Row, []outbox.Outcome, bool) {
	var pause time.Duration
	var keepRows, held []outbox.Row
	var keepOut []outbox.Outcome
	for i, o := range out {
		if d, ok := LinkRefusal(o); ok {
			pause = max(pause, d)
			held = append(held, rows[i])
			continue
		}
		keepRows, keepOut = append(keepRows, rows[i]), append(keepOut, o)
	}
	if len(held) == 0 {
		return rows, out, true
	}
	until := l.pause(pause)
	l.log.Warn("relay asks to slow down: relay link paused", logkey.RetryIn, pause.String(), logkey.Count, len(held))
	return keepRows, keepOut, l.Postpone(ctx, held, until)
}

// Postpone moves rows due for the relay to the end of its pause, counting no attempt. It reports
// whether they were moved (and the context is still live).
func (l *Link) Postpone(ctx context.Context, rows []outbox.Row, until time.Time) bool {
	note := fmt.Sprintf("relay link paused until %s (the relay asked to slow down)", until.UTC().Format(time.RFC3339))
	err := l.db.Update(func(tx *bbolt.Tx) error {
		ob := l.ob.In(tx)
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
		l.log.Error("postponing outbox rows for the relay pause", logkey.Err, err)
		return false
	}
	return ctx.Err() == nil
}
