package relayserver

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"time"
)

// challenger makes enrolment challenges that need no table: the challenge of a host key is the
// first 16 bytes of HMAC-SHA256, under the store's secret, of the key and an expiry, base64url
// without padding (the 0.5.x challenge format). An enrolment is checked against the challenges
// still open for its key, so nothing is stored when one is issued and nothing is consumed when
// one is answered; every relay process sharing the store's secret issues and checks the same
// challenges.
//
// Expiries are the ends of ttl-long slots: a challenge issued in slot n expires at the end of
// slot n+1, so it stays open between ttl and 2·ttl, and at any instant two are open per key.
type challenger struct {
	secret []byte
	ttl    time.Duration
}

// challengeLabel separates these MACs from any other use of the secret.
const challengeLabel = "agentmbx enrolment challenge v1\x00"

func (c challenger) mac(pubkey string, expiryMS int64) string {
	m := hmac.New(sha256.New, c.secret)
	m.Write([]byte(challengeLabel))
	m.Write([]byte(pubkey))
	var b [9]byte
	b[0] = 0
	binary.BigEndian.PutUint64(b[1:], uint64(expiryMS))
	m.Write(b[:])
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil)[:16])
}

func (c challenger) slot(now time.Time) int64 { return now.UnixMilli() / c.ttl.Milliseconds() }

// issue returns the challenge of pubkey at now.
func (c challenger) issue(pubkey string, now time.Time) string {
	return c.mac(pubkey, (c.slot(now)+2)*c.ttl.Milliseconds())
}

// open returns the challenges of pubkey open at now, the newest first.
func (c challenger) open(pubkey string, now time.Time) [2]string {
	n, ms := c.slot(now), c.ttl.Milliseconds()
	return [2]string{c.mac(pubkey, (n+2)*ms), c.mac(pubkey, (n+1)*ms)}
}
