package relayserver

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"io"
	"slices"
	"strconv"
	"sync"
)

// encodeScratch is the buffer a pull answer is encoded through: the answer is written to the
// client a scratch buffer at a time, never built whole.
const encodeScratch = 32 << 10

// scratchBufs are the buffers pull answers are encoded through.
var scratchBufs = sync.Pool{New: func() any { b := make([]byte, 0, encodeScratch); return &b }}

// pageEncoder writes a pull answer, {epoch, head_seq, items, last_seq, more}, byte for byte as
// writeJSON would write the mbx.PullResponse (pullResponse), through a fixed scratch buffer: the
// wires are base64-encoded into it piece by piece. The first failed write is kept in err and
// every later write is skipped.
type pageEncoder struct {
	w   io.Writer
	buf []byte
	err error
}

// flushAt is how full the scratch buffer may get before it is written out.
const flushAt = encodeScratch - 2<<10

func (e *pageEncoder) flush() {
	if e.err == nil && len(e.buf) > 0 {
		_, e.err = e.w.Write(e.buf)
	}
	e.buf = e.buf[:0]
}

func (e *pageEncoder) maybeFlush() {
	if len(e.buf) >= flushAt {
		e.flush()
	}
}

// start writes the answer up to the first item.
func (e *pageEncoder) start(epoch string, head int64) {
	e.buf = appendJSONString(append(e.buf, `{"epoch":`...), epoch)
	e.buf = strconv.AppendInt(append(e.buf, `,"head_seq":`...), head, 10)
	e.buf = append(e.buf, `,"items":[`...)
	e.maybeFlush()
}

// item writes one item; first says it is the page's first.
func (e *pageEncoder) item(it *Item, first bool) {
	if !first {
		e.buf = append(e.buf, ',')
	}
	e.buf = strconv.AppendInt(append(e.buf, `{"seq":`...), it.Seq, 10)
	e.buf = appendJSONString(append(e.buf, `,"kind":`...), string(it.Kind))
	e.buf = appendJSONString(append(e.buf, `,"item_id":`...), it.ItemID)
	e.buf = appendJSONString(append(e.buf, `,"sender_pubkey":`...), it.Sender)
	e.buf = append(e.buf, `,"wire_b64":"`...)
	for src := it.Wire; len(src) > 0; {
		n := (cap(e.buf) - len(e.buf)) / 4 * 3 // whole 3-byte groups: no padding inside the string
		if n < 3<<10 {
			e.flush()
			continue
		}
		if n >= len(src) {
			e.buf = appendBase64(e.buf, src)
			break
		}
		e.buf = appendBase64(e.buf, src[:n])
		src = src[n:]
		e.flush()
	}
	e.buf = append(e.buf, `"}`...)
	e.maybeFlush()
}

// end writes the rest of the answer after the last item and flushes it.
func (e *pageEncoder) end(last int64, more bool) {
	e.buf = strconv.AppendInt(append(e.buf, `],"last_seq":`...), last, 10)
	e.buf = append(strconv.AppendBool(append(e.buf, `,"more":`...), more), '}')
	e.flush()
}

// pageJSONLen is the length of the answer pageEncoder writes for items (last_seq last, more).
func pageJSONLen(epoch string, head, last int64, items []Item, more bool) int64 {
	n := int64(len(`{"epoch":,"head_seq":,"items":[],"last_seq":,"more":}`))
	n += jsonStringLen(epoch) + intLen(head) + intLen(last) + int64(len(strconv.FormatBool(more)))
	for i := range items {
		it := &items[i]
		if i > 0 {
			n++
		}
		n += int64(len(`{"seq":,"kind":,"item_id":,"sender_pubkey":,"wire_b64":""}`)) + intLen(it.Seq)
		n += jsonStringLen(string(it.Kind)) + jsonStringLen(it.ItemID) + jsonStringLen(it.Sender)
		n += int64(base64.StdEncoding.EncodedLen(len(it.Wire)))
	}
	return n
}

func intLen(v int64) int64 {
	var b [24]byte
	return int64(len(strconv.AppendInt(b[:0], v, 10)))
}

// appendJSONString appends s as a JSON string, as writeJSON's encoder writes it (no HTML
// escaping).
func appendJSONString(buf []byte, s string) []byte {
	if plainJSON(s) {
		return append(append(append(buf, '"'), s...), '"')
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	return append(buf, bytes.TrimSuffix(b.Bytes(), []byte("\n"))...)
}

// jsonStringLen is the length appendJSONString appends for s.
func jsonStringLen(s string) int64 {
	if plainJSON(s) {
		return int64(len(s)) + 2
	}
	return int64(len(appendJSONString(nil, s)))
}

// plainJSON reports whether s is printable ASCII that no JSON encoder escapes.
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}

// b64Pairs holds the two standard base64 characters of every 12-bit value, the first in the low
// byte.
var b64Pairs = func() *[4096]uint16 {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
	t := new([4096]uint16)
	for v := range t {
		t[v] = uint16(alphabet[v>>6]) | uint16(alphabet[v&63])<<8
	}
	return t
}()

// appendBase64 is base64.StdEncoding.AppendEncode(dst, src), 6 bytes of src (8 characters) a
// step: the pull answer is mostly base64.
func appendBase64(dst, src []byte) []byte {
	n := base64.StdEncoding.EncodedLen(len(src))
	dst = slices.Grow(dst, n)
	out := dst[len(dst) : len(dst)+n]
	j := 0
	for len(src) >= 8 { // reads 8 bytes, encodes 6
		v := binary.BigEndian.Uint64(src) >> 16
		binary.LittleEndian.PutUint64(out[j:], uint64(b64Pairs[v>>36])|uint64(b64Pairs[v>>24&0xfff])<<16|
			uint64(b64Pairs[v>>12&0xfff])<<32|uint64(b64Pairs[v&0xfff])<<48)
		src, j = src[6:], j+8
	}
	base64.StdEncoding.Encode(out[j:], src)
	return dst[:len(dst)+n]
}
