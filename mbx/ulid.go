package mbx

import (
	"io"
	"regexp"
	"sync"
	"time"
)

const crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

var ulidRE = regexp.MustCompile(`^[0-9A-HJKMNP-TV-Z]{26}$`)

// ValidULID reports whether s is a message id: 26 Crockford base32 characters.
func ValidULID(s string) bool { return ulidRE.MatchString(s) }

// ULIDs makes message ids: 10 characters of the millisecond time, most significant first, then 16
// random characters. Within one millisecond the ids are monotonic: the random part of the previous
// id is incremented by one (last character first, with carry), as the original does. It is safe
// for concurrent use.
type ULIDs struct {
	mu     sync.Mutex
	rand   io.Reader
	lastMS int64
	last   [16]byte // indexes into crockford
	have   bool
}

// NewULIDs makes a generator drawing randomness from r (crypto/rand.Reader in production).
func NewULIDs(r io.Reader) *ULIDs { return &ULIDs{rand: r} }

// New returns the id for now.
func (u *ULIDs) New(now time.Time) string {
	u.mu.Lock()
	defer u.mu.Unlock()
	ms := now.UnixMilli()
	if !u.have || ms != u.lastMS || !u.increment() {
		u.fresh()
	}
	u.lastMS, u.have = ms, true
	var out [26]byte
	t := uint64(ms)
	for i := 9; i >= 0; i-- {
		out[i] = crockford[t%32]
		t /= 32
	}
	for i, d := range u.last {
		out[10+i] = crockford[d]
	}
	return string(out[:])
}

// fresh draws a new random part: each character from one random byte mod 32.
func (u *ULIDs) fresh() {
	var b [16]byte
	if _, err := io.ReadFull(u.rand, b[:]); err != nil {
		panic("mbx: ULID randomness source failed: " + err.Error())
	}
	for i := range b {
		u.last[i] = b[i] % 32
	}
}

// increment adds one to the random part; false when it was all 'Z' (it then needs a fresh one).
func (u *ULIDs) increment() bool {
	for i := 15; i >= 0; i-- {
		if u.last[i] < 31 {
			u.last[i]++
			return true
		}
		u.last[i] = 0
	}
	return false
}
