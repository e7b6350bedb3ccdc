package relayserver

import (
	"encoding/base64"
	"fmt"
	"io"
	"sync"
	"time"
)

// challenges holds the open enrolment challenges in memory: one per host key, expiring, and
// capped. A restart forgets them; clients simply ask again.
type challenges struct {
	mu  sync.Mutex
	max int
	ttl time.Duration
	m   map[string]challenge // by host key
}

type challenge struct {
	nonce   string
	expires time.Time
}

func newChallenges(max int, ttl time.Duration) *challenges {
	return &challenges{max: max, ttl: ttl, m: map[string]challenge{}}
}

// issue makes a new challenge for pubkey (replacing any open one): 16 random bytes, base64url
// without padding.
func (c *challenges) issue(pubkey string, now time.Time, r io.Reader) (string, error) {
	var b [16]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return "", fmt.Errorf("challenge: %w", err)
	}
	nonce := base64.RawURLEncoding.EncodeToString(b[:])
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[pubkey]; !ok && len(c.m) >= c.max {
		for k, ch := range c.m {
			if !now.Before(ch.expires) {
				delete(c.m, k)
			}
		}
		if len(c.m) >= c.max {
			return "", ErrTooManyChallenges
		}
	}
	c.m[pubkey] = challenge{nonce: nonce, expires: now.Add(c.ttl)}
	return nonce, nil
}

// take removes and returns the open challenge of pubkey, if it has not expired. A challenge is
// used at most once, whether the enrolment then succeeds or not.
func (c *challenges) take(pubkey string, now time.Time) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch, ok := c.m[pubkey]
	if !ok {
		return "", false
	}
	delete(c.m, pubkey)
	if !now.Before(ch.expires) {
		return "", false
	}
	return ch.nonce, true
}

func (c *challenges) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}
