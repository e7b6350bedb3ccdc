package outbox

import (
	"fmt"
	"time"
)

// Retry schedule and deadlines.
const (
	// BaseBackoff is the wait after a row's first failed attempt.
	BaseBackoff = 5 * time.Second
	// MaxBackoff caps the wait between attempts.
	MaxBackoff = time.Hour
	// DefaultLANDeadline is how long a pending row may stay undelivered before it ends expired.
	DefaultLANDeadline = 72 * time.Hour
	// DefaultGrace is added to the relay's retention to give a relay-accepted row its deadline.
	DefaultGrace = 24 * time.Hour
)

// Backoff returns min(5 s · 2^attempts, 1 h), where attempts is the number of attempts the row
// had made before the one that just failed. So the n-th failure waits 5 s · 2^(n−1):
// 5 s, 10 s, 20 s, 40 s, 80 s, 160 s, 320 s, 640 s, 1280 s, 2560 s, then 1 h from the 11th on.
// A negative count is treated as 0.
func Backoff(attempts int) time.Duration {
	if attempts < 0 {
		attempts = 0
	}
	// 5 s · 2^10 already exceeds an hour; stop shifting well before overflow.
	if attempts >= 10 {
		return MaxBackoff
	}
	return min(BaseBackoff<<attempts, MaxBackoff)
}

// JitterSpread is the jitter on every persisted backoff: a row waits Backoff(n) scaled by a factor
// drawn uniformly from [1−JitterSpread, 1+JitterSpread), so hosts that failed together do not all
// retry at the same moment.
const JitterSpread = 0.2

// Jittered scales d by 1 + JitterSpread·(2u−1). u is a uniform draw in [0, 1); values outside
// are clamped into it, so the result always lies in [d·0.8, d·1.2]. It is cut to the millisecond,
// the precision rows keep.
func Jittered(d time.Duration, u float64) time.Duration {
	u = max(0, min(u, 1))
	return time.Duration(float64(d) * (1 + JitterSpread*(2*u-1))).Truncate(time.Millisecond)
}

// LatestBackoff is the longest a row can wait after a failed attempt when it had made attempts
// before it: Backoff(attempts) with the most jitter up.
func LatestBackoff(attempts int) time.Duration {
	return Jittered(Backoff(attempts), 1)
}

// fmtDur prints a duration the way people read deadlines: "72h", "15d", "90m", "1.5s".
func fmtDur(d time.Duration) string {
	switch {
	case d >= 7*24*time.Hour && d%(24*time.Hour) == 0:
		return fmt.Sprintf("%dd", d/(24*time.Hour))
	case d%time.Hour == 0 && d != 0:
		return fmt.Sprintf("%dh", d/time.Hour)
	case d%time.Minute == 0 && d != 0:
		return fmt.Sprintf("%dm", d/time.Minute)
	default:
		return d.String()
	}
}
