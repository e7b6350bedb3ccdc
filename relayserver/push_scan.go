package relayserver

import (
	"bytes"
	"fmt"
)

// A push body is counted as it arrives: batchCounter watches its bytes (bodylimit.Scanner) and
// refuses the body once an array that a push bounds has one element too many (max_batch items,
// max_targets targets per item), before the rest is read and long before anything is decoded.
// The decoder checks the same limits again on what it decodes; the counter only makes a body over
// them cost what arrived up to that point.
//
// It is a small state machine over JSON bytes, not a validator: it tracks the containers up to the
// depth of an item's targets, the member name each value belongs to, and whether it is inside a
// string. Member names are compared as encoding/json compares them, case-insensitively; a name
// with an escape or a non-ASCII byte might fold to the bounded name, so its arrays are counted too.
// Malformed bodies may be counted oddly; the decoder refuses them anyway.

// scanRole is what an array or object of a push body is.
type scanRole uint8

const (
	roleOther   scanRole = iota
	roleTop              // the body's object
	roleBatch            // the array of items (or v1 envelopes)
	roleItem             // an item of the batch
	roleTargets          // an item's targets
)

// scanFrame is one open container down to scanDepth.
type scanFrame struct {
	role    scanRole
	object  bool
	wantKey bool // object: the next string is a member name
	key     scanRole
	pending bool // array: the next value starts an element
	count   int
}

const (
	scanDepth  = 4  // body object, batch array, item object, targets array
	scanKeyMax = 16 // longer plain names match nothing that is bounded
)

// batchCounter is the bodylimit.Scanner of a push body. batchName is the member holding the
// batch ("items", or "envelopes" for v1); over is called with the role and the count that passed
// its limit, and returns the refusal.
type batchCounter struct {
	batchName            string
	maxBatch, maxTargets int
	over                 func(role scanRole, item, n int) error

	depth  int // open containers, tracked or not
	frames [scanDepth]scanFrame
	items  int // batch elements seen, for the index of the item whose targets are counted

	inString bool
	isKey    bool // the string is a member name being read into key
	bsRun    int  // backslashes just before the current byte, inside a string
	key      [scanKeyMax]byte
	keyLen   int
	keyOdd   bool // an escape, a non-ASCII byte, or too long to read
}

func (c *batchCounter) top() *scanFrame {
	if c.depth == 0 || c.depth > scanDepth {
		return nil
	}
	return &c.frames[c.depth-1]
}

// Scan implements bodylimit.Scanner.
func (c *batchCounter) Scan(b []byte) error {
	for i := 0; i < len(b); {
		if c.inString {
			i = c.scanString(b, i)
			continue
		}
		ch := b[i]
		i++
		switch ch {
		case ' ', '\t', '\r', '\n':
			continue
		}
		f := c.top()
		if f != nil && !f.object && f.pending && ch != ']' {
			f.pending = false
			if err := c.element(f); err != nil {
				return err
			}
		}
		switch ch {
		case '{', '[':
			c.open(f, ch == '{')
		case '}', ']':
			if c.depth > 0 {
				c.depth--
			}
		case ':':
			if f != nil && f.object {
				f.wantKey = false
			}
		case ',':
			if f != nil {
				f.wantKey, f.pending = f.object, !f.object
			}
		case '"':
			c.inString, c.bsRun = true, 0
			c.isKey = f != nil && f.object && f.wantKey
			c.keyLen, c.keyOdd = 0, false
		}
	}
	return nil
}

// element counts an element starting in the array f.
func (c *batchCounter) element(f *scanFrame) error {
	f.count++
	switch f.role {
	case roleBatch:
		c.items = f.count
		if f.count > c.maxBatch {
			return &scanError{c.over(roleBatch, 0, f.count)}
		}
	case roleTargets:
		if f.count > c.maxTargets {
			return &scanError{c.over(roleTargets, c.items-1, f.count)}
		}
	}
	return nil
}

// open enters a container whose parent is f (nil: the top level, or past the tracked depth).
func (c *batchCounter) open(f *scanFrame, object bool) {
	c.depth++
	if c.depth > scanDepth {
		return
	}
	role := roleOther
	switch {
	case c.depth == 1:
		if object {
			role = roleTop
		}
	case f == nil:
	case f.object:
		if !object && ((f.role == roleTop && f.key == roleBatch) || (f.role == roleItem && f.key == roleTargets)) {
			role = f.key
		}
	case f.role == roleBatch && object:
		role = roleItem
	}
	c.frames[c.depth-1] = scanFrame{role: role, object: object, wantKey: object, pending: !object}
}

// scanString consumes string bytes of b from i and returns where it stopped: past the closing
// quote, or at the end of b.
func (c *batchCounter) scanString(b []byte, i int) int {
	if !c.isKey {
		// A value: only its end matters. Jump to the next quote; it ends the string unless an odd
		// run of backslashes escapes it.
		for {
			j := bytes.IndexByte(b[i:], '"')
			if j < 0 {
				c.bsRun = trailingBackslashes(b[i:], c.bsRun)
				return len(b)
			}
			run := trailingBackslashes(b[i:i+j], c.bsRun)
			i += j + 1
			if run%2 == 0 {
				c.inString = false
				return i
			}
			c.bsRun = 0
		}
	}
	for ; i < len(b); i++ {
		ch := b[i]
		switch {
		case c.bsRun%2 == 1:
			c.keyOdd = true
			c.bsRun = 0
			continue
		case ch == '\\':
			c.bsRun++
			continue
		case ch == '"':
			c.inString = false
			c.nameKey()
			return i + 1
		case ch >= 0x80 || c.keyLen == scanKeyMax:
			c.keyOdd = true
		default:
			if 'A' <= ch && ch <= 'Z' {
				ch += 'a' - 'A'
			}
			c.key[c.keyLen] = ch
			c.keyLen++
		}
		c.bsRun = 0
	}
	return i
}

// trailingBackslashes is the run of backslashes ending b, added to carried when b is all
// backslashes.
func trailingBackslashes(b []byte, carried int) int {
	n := 0
	for n < len(b) && b[len(b)-1-n] == '\\' {
		n++
	}
	if n == len(b) {
		return carried + n
	}
	return n
}

// nameKey records the member name just read in its object: the role of a bounded array it names.
func (c *batchCounter) nameKey() {
	f := c.top()
	if f == nil {
		return
	}
	k := string(c.key[:c.keyLen])
	f.key = roleOther
	switch {
	case f.role == roleTop && (c.keyOdd || k == c.batchName):
		f.key = roleBatch
	case f.role == roleItem && (c.keyOdd || k == "targets"):
		f.key = roleTargets
	}
}

// pushCounter is the counter of a v2 push body.
func (s *Server) pushCounter() *batchCounter {
	return &batchCounter{batchName: "items", maxBatch: s.lim.MaxBatch, maxTargets: s.lim.MaxTargets,
		over: func(role scanRole, item, n int) error {
			if role == roleTargets {
				return fmt.Errorf("%w: items[%d]: more than %d targets", ErrBadRequest, item, s.lim.MaxTargets)
			}
			return fmt.Errorf("%w: more than %d items, max_batch is %d", ErrBadRequest, s.lim.MaxBatch, s.lim.MaxBatch)
		}}
}
