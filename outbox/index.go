package outbox

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"time"

	"go.etcd.io/bbolt"
)

// The indexes. Next to the rows, the outbox keeps indexes that every operation updates in the
// same transaction, so no pass reads rows it does not need:
//
//   - due (next_at, key): pending rows and relay-accepted rows flagged for re-push. Due and
//     Claim walk it from the start up to now: O(due rows), however many rows wait or ended.
//     DueWith bounds the walk by rows and wire bytes and passes over chosen hosts.
//   - host (host, key): active rows per host. MakeDue (a verified inbound hop from the host:
//     make its rows due now) and RebindHost (the peer rotated its key) walk only that host's.
//   - relay (relay, key): relay-accepted rows per relay, for RelayAccepted and RepushRelay.
//   - deadline (deadline, key): active rows, for Sweep.
//   - ended (ended_at, key): ended rows, for Prune.
//   - created (created_at, key) → state: every row, for Page (`agentmbx outbox`): the newest
//     rows of some states without decoding the others.
//
// Tx.Check verifies all of them against the rows.
//
// Bucket layout, all nested under the top-level bucket "outbox":
//
//	rows      rowkey                          → row record (codec.go)
//	wire      rowkey                          → wire bytes, written once by Add
//	due       be64(next_at) ‖ rowkey          → ""   pending rows and relay-accepted rows flagged repush
//	host      host ‖ 0x00 ‖ rowkey            → be64(next_at) when the row is in due, else ""   (active rows)
//	relay     relay ‖ 0x00 ‖ rowkey           → ""   relay-accepted rows
//	deadline  be64(deadline) ‖ rowkey         → ""   active rows
//	ended     be64(ended_at) ‖ rowkey         → ""   ended rows
//	created   be64(created_at) ‖ rowkey       → state (one byte)   every row (schema 2)
//	meta      "schema"                        → be64(schema version)
//
// rowkey = item_id ‖ 0x00 ‖ host. Item ids, host names and relay URLs are validated to hold
// no control characters, so 0x00 separates them unambiguously and a prefix scan of
// "host ‖ 0x00" or "relay ‖ 0x00" finds exactly that host's or relay's rows. be64(t) is the
// Unix millisecond time with its sign bit flipped, big-endian, so byte order is time order.
var (
	bucketTop      = []byte("outbox")
	bucketRows     = []byte("rows")
	bucketWire     = []byte("wire")
	bucketDue      = []byte("due")
	bucketHost     = []byte("host")
	bucketRelay    = []byte("relay")
	bucketDeadline = []byte("deadline")
	bucketEnded    = []byte("ended")
	bucketCreated  = []byte("created")
	bucketMeta     = []byte("meta")

	metaSchema = []byte("schema")
)

// schemaVersion is the layout above. Open refuses a store with a higher one. Version 2 added the
// created index; Open builds it for a version 1 store.
const schemaVersion = 2

var subBuckets = [][]byte{bucketRows, bucketWire, bucketDue, bucketHost, bucketRelay, bucketDeadline, bucketEnded, bucketCreated, bucketMeta}

type buckets struct {
	rows, wire, due, host, relay, deadline, ended, created, meta *bbolt.Bucket
}

func openBuckets(tx *bbolt.Tx) (buckets, error) {
	top := tx.Bucket(bucketTop)
	if top == nil {
		return buckets{}, ErrNoBuckets
	}
	b := buckets{
		rows: top.Bucket(bucketRows), wire: top.Bucket(bucketWire), due: top.Bucket(bucketDue),
		host: top.Bucket(bucketHost), relay: top.Bucket(bucketRelay), deadline: top.Bucket(bucketDeadline),
		ended: top.Bucket(bucketEnded), created: top.Bucket(bucketCreated), meta: top.Bucket(bucketMeta),
	}
	if b.rows == nil || b.wire == nil || b.due == nil || b.host == nil || b.relay == nil ||
		b.deadline == nil || b.ended == nil || b.created == nil || b.meta == nil {
		return buckets{}, ErrNoBuckets
	}
	return b, nil
}

func createBuckets(tx *bbolt.Tx) error {
	top, err := tx.CreateBucketIfNotExists(bucketTop)
	if err != nil {
		return err
	}
	for _, name := range subBuckets {
		if _, err := top.CreateBucketIfNotExists(name); err != nil {
			return err
		}
	}
	meta := top.Bucket(bucketMeta)
	if v := meta.Get(metaSchema); v != nil {
		if len(v) != 8 {
			return fmt.Errorf("%w: schema version record", ErrCorrupt)
		}
		got := binary.BigEndian.Uint64(v)
		if got > schemaVersion {
			return fmt.Errorf("%w: version %d, this binary knows %d", ErrSchema, got, schemaVersion)
		}
		if got == schemaVersion {
			return nil
		}
		if err := buildCreated(top); err != nil {
			return err
		}
	}
	return meta.Put(metaSchema, binary.BigEndian.AppendUint64(nil, schemaVersion))
}

// buildCreated fills the created index from the rows (the step from schema 1 to 2).
func buildCreated(top *bbolt.Bucket) error {
	created := top.Bucket(bucketCreated)
	return top.Bucket(bucketRows).ForEach(func(k, v []byte) error {
		r, err := decodeRow(v)
		if err != nil {
			return fmt.Errorf("%w: row %q: %v", ErrCorrupt, k, err)
		}
		return created.Put(timeKey(r.CreatedAt, k), []byte{byte(r.State)})
	})
}

func rowKey(k Key) []byte {
	b := make([]byte, 0, len(k.ItemID)+1+len(k.Host))
	b = append(b, k.ItemID...)
	b = append(b, 0)
	return append(b, k.Host...)
}

func parseRowKey(b []byte) (Key, bool) {
	i := bytes.IndexByte(b, 0)
	if i <= 0 || i == len(b)-1 {
		return Key{}, false
	}
	return Key{ItemID: string(b[:i]), Host: string(b[i+1:])}, true
}

// timeBits maps a time to an unsigned value whose order is time order.
func timeBits(t time.Time) uint64 { return uint64(t.UnixMilli()) ^ (1 << 63) }

func bitsTime(v uint64) time.Time { return time.UnixMilli(int64(v ^ (1 << 63))).UTC() }

// timeKey is be64(t) ‖ rowkey (due, deadline and ended indexes).
func timeKey(t time.Time, rk []byte) []byte {
	b := make([]byte, 8, 8+len(rk))
	binary.BigEndian.PutUint64(b, timeBits(t))
	return append(b, rk...)
}

// prefixKey is name ‖ 0x00 ‖ rowkey (host and relay indexes).
func prefixKey(name string, rk []byte) []byte {
	b := make([]byte, 0, len(name)+1+len(rk))
	b = append(b, name...)
	b = append(b, 0)
	return append(b, rk...)
}

func prefixOf(name string) []byte { return append([]byte(name), 0) }

// hostValue is the host index value of r.
func hostValue(r *Row) []byte {
	if !r.due() {
		return []byte{}
	}
	return binary.BigEndian.AppendUint64(nil, timeBits(r.NextAt))
}

// indexEntries are the index keys (and the host value) that a row owns.
type indexEntries struct {
	due, host, relay, deadline, ended, created []byte
	hostVal, createdVal                        []byte
}

func entriesOf(r *Row, rk []byte) indexEntries {
	e := indexEntries{created: timeKey(r.CreatedAt, rk), createdVal: []byte{byte(r.State)}}
	if r.due() {
		e.due = timeKey(r.NextAt, rk)
	}
	if r.State.Active() {
		e.host = prefixKey(r.Host, rk)
		e.hostVal = hostValue(r)
		e.deadline = timeKey(r.Deadline, rk)
	}
	if r.State == StateRelayAccepted {
		e.relay = prefixKey(r.Relay, rk)
	}
	if r.State.Ended() {
		e.ended = timeKey(r.EndedAt, rk)
	}
	return e
}
