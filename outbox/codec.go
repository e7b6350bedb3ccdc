package outbox

import (
	"encoding/binary"
	"fmt"
	"time"
)

// Row values in the rows bucket are a small binary record (the due pass decodes every due row,
// so it is kept cheap). Wire bytes live in their own bucket and are not part of it.
//
//	byte     version (rowVersion)
//	byte     kind, state, transport
//	byte     flags (bit 0: repush)
//	byte     time mask (bit i set: time i present; order below)
//	uvarint  attempts, lan_failures
//	varint   seq
//	varint   present times as Unix milliseconds, in the order
//	         created_at, updated_at, next_at, accepted_at, deadline, ended_at, relay_v1_at,
//	         lan_unsigned_at (bit 7, added later: records without it read as before)
//	12 × (uvarint length, bytes): item_id, msg_id, host, host_key, agent, subject,
//	         last_error, reason, relay, epoch, statement_sig, statement
const rowVersion = 1

const flagRepush = 1 << 0

func (r *Row) times() [8]*time.Time {
	return [8]*time.Time{&r.CreatedAt, &r.UpdatedAt, &r.NextAt, &r.AcceptedAt, &r.Deadline, &r.EndedAt, &r.RelayV1At, &r.LANUnsignedAt}
}

func (r *Row) strs() [11]*string {
	return [11]*string{&r.ItemID, &r.MsgID, &r.Host, &r.HostKey, &r.Agent, &r.Subject,
		&r.LastError, &r.Reason, &r.Relay, &r.Epoch, &r.StatementSig}
}

// encodeRow returns r's stored form (without Wire).
func encodeRow(r *Row) []byte {
	n := 6 + 3*binary.MaxVarintLen64 + 8*binary.MaxVarintLen64 + len(r.Statement) + binary.MaxVarintLen64
	for _, s := range r.strs() {
		n += len(*s) + binary.MaxVarintLen64
	}
	b := make([]byte, 0, n)
	var flags, mask byte
	if r.Repush {
		flags |= flagRepush
	}
	times := r.times()
	for i, t := range times {
		if !t.IsZero() {
			mask |= 1 << i
		}
	}
	b = append(b, rowVersion, byte(r.Kind), byte(r.State), byte(r.Transport), flags, mask)
	b = binary.AppendUvarint(b, uint64(r.Attempts))
	b = binary.AppendUvarint(b, uint64(r.LANFailures))
	b = binary.AppendVarint(b, r.Seq)
	for _, t := range times {
		if !t.IsZero() {
			b = binary.AppendVarint(b, t.UnixMilli())
		}
	}
	for _, s := range r.strs() {
		b = binary.AppendUvarint(b, uint64(len(*s)))
		b = append(b, *s...)
	}
	b = binary.AppendUvarint(b, uint64(len(r.Statement)))
	b = append(b, r.Statement...)
	return b
}

// decoder reads a stored row; the first error sticks.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: row record: bad %s", ErrCorrupt, what)
	}
}

func (d *decoder) uvarint(what string) uint64 { return readVarint(d, what, binary.Uvarint) }

func (d *decoder) varint(what string) int64 { return readVarint(d, what, binary.Varint) }

// readVarint reads one varint with read (binary.Uvarint or binary.Varint).
func readVarint[T uint64 | int64](d *decoder, what string, read func([]byte) (T, int)) T {
	if d.err != nil {
		return 0
	}
	v, n := read(d.b)
	if n <= 0 {
		d.fail(what)
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) count(what string, limit uint64) int {
	v := d.uvarint(what)
	if v > limit {
		d.fail(what)
		return 0
	}
	return int(v)
}

func (d *decoder) bytes(what string) []byte {
	n := d.uvarint(what)
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)) {
		d.fail(what)
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

// decodeRow reads a stored row. It copies everything it keeps, so b may be bbolt memory.
func decodeRow(b []byte) (Row, error) {
	var r Row
	if len(b) < 6 {
		return r, fmt.Errorf("%w: row record: short", ErrCorrupt)
	}
	if b[0] != rowVersion {
		return r, fmt.Errorf("%w: row record: version %d", ErrCorrupt, b[0])
	}
	r.Kind, r.State, r.Transport = Kind(b[1]), State(b[2]), Transport(b[3])
	flags, mask := b[4], b[5]
	if !r.Kind.valid() || !r.State.valid() || r.Transport > TransportRelay || flags&^flagRepush != 0 {
		return r, fmt.Errorf("%w: row record: bad header", ErrCorrupt)
	}
	r.Repush = flags&flagRepush != 0
	d := decoder{b: b[6:]}
	const maxCount = 1 << 40
	r.Attempts = d.count("attempts", maxCount)
	r.LANFailures = d.count("lan_failures", maxCount)
	r.Seq = d.varint("seq")
	for i, t := range r.times() {
		if mask&(1<<i) != 0 {
			*t = time.UnixMilli(d.varint("time")).UTC()
		}
	}
	for _, s := range r.strs() {
		*s = string(d.bytes("string"))
	}
	if st := d.bytes("statement"); len(st) > 0 {
		r.Statement = append([]byte(nil), st...)
	}
	if d.err != nil {
		return Row{}, d.err
	}
	if len(d.b) != 0 {
		return Row{}, fmt.Errorf("%w: row record: %d trailing bytes", ErrCorrupt, len(d.b))
	}
	return r, nil
}
