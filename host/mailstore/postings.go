package mailstore

import (
	"bytes"

	"go.etcd.io/bbolt"
)

// postings is one sorted list of message ids: the keys k ‖ 0x00 ‖ id of a bucket.
type postings struct {
	c      *bbolt.Cursor
	prefix []byte
}

// newPostings is the list of the ids under k in b.
func newPostings(b *bbolt.Bucket, k string) *postings {
	return &postings{c: b.Cursor(), prefix: prefix(k)}
}

// seekLE returns the greatest id in the list that is ≤ id (< id when strict), and false when
// there is none.
func (l *postings) seekLE(id []byte, strict bool) ([]byte, bool) {
	target := append(bytes.Clone(l.prefix), id...)
	k, _ := l.c.Seek(target)
	if !strict && k != nil && bytes.Equal(k, target) {
		return k[len(l.prefix):], true
	}
	if k == nil {
		k, _ = l.c.Last()
	} else {
		k, _ = l.c.Prev()
	}
	if k == nil || !bytes.HasPrefix(k, l.prefix) {
		return nil, false
	}
	return k[len(l.prefix):], true
}

// intersectDesc calls visit with each id that is in every list, greatest first, until visit
// returns false or a list runs out (a leapfrog join: each list in turn seeks to the current
// candidate; a list that holds it agrees, one that does not lowers the candidate). It reads about
// as many keys as the shortest list holds in the worst case.
func intersectDesc(lists []*postings, visit func(id []byte) bool) {
	x, strict := []byte{0xff}, false
	for {
		agreed := 0
		for i := 0; agreed < len(lists); i = (i + 1) % len(lists) {
			v, ok := lists[i].seekLE(x, strict)
			strict = false
			if !ok {
				return
			}
			if bytes.Equal(v, x) {
				agreed++
			} else {
				x, agreed = v, 1
			}
		}
		if !visit(x) {
			return
		}
		strict = true
	}
}
