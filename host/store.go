package host

import (
	"encoding/binary"
	"fmt"
	"time"

	"go.etcd.io/bbolt"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/host/agents"
	"github.com/agentmbx/agentmbx/host/internal/boltjson"
	"github.com/agentmbx/agentmbx/host/mailstore"
	"github.com/agentmbx/agentmbx/host/peers"
)

// The layout of state.db: one bbolt file, these top-level buckets (k1 ‖ 0x00 ‖ k2 keys; names and
// ids hold no NUL):
//
//	meta      "host", "listen", "created", "schema" (be64), "heard:<host>" (a receipt came from host)
//	peers     host → peers.Record JSON (host key, enc key, addr, retired keys; package host/peers)
//	agents    name → {name, role, added_at, created_by} (package host/agents)
//	messages  msg id → the plaintext message (mail received, sent here, and alerts)
//	mbox      agent ‖ msg id → {state, at, note, seq, origin}: one local recipient's copy
//	unread    agent ‖ msg id → "": the copies not yet read (delivered, notified)
//	deliveries agent ‖ msg id → be64: how many times the copy was put in the mailbox (1)
//	sent      msg id → where a message sent here went: local agents, hosts, name@host per host
//	rstate    msg id ‖ recipient → the last accepted delivery receipt {host, state, seq, at, note}
//	seen      msg id → {host, at}: received ids, for dedup (kept SeenRetention, 60 days)
//	seen_at   be64(at) ‖ msg id → "": the prune index of seen
//	idx_*, fresh  the mail indexes (mailstore.IndexBuckets, schema 2): written with each message,
//	          built when a schema 1 store is opened
//	relay     "state" → the pinned relay and what this host knows of it (package relaylink)
//
// messages, mbox, unread, deliveries and the indexes are package host/mailstore's (mailstore.Buckets). And
// the buckets of the packages that share the file: outbox (rows, wire bytes and their
// indexes), quarantine (relay items this host refused) and checkpoint (relay-positions: the receive
// checkpoint per relay).
var (
	bucketMeta   = []byte("meta")
	bucketPeers  = peers.Bucket
	bucketAgents = agents.Bucket
	bucketSent   = []byte("sent")
	bucketRState = []byte("rstate")
	bucketSeen   = []byte("seen")
	bucketSeenAt = []byte("seen_at")

	allBuckets = append([][]byte{bucketMeta, bucketPeers, bucketAgents, bucketSent, bucketRState,
		bucketSeen, bucketSeenAt}, mailstore.Buckets...)

	metaHost    = []byte("host")
	metaListen  = []byte("listen")
	metaCreated = []byte("created")
	metaSchema  = []byte("schema")
)

// schemaVersion is the layout above. Open refuses a store with a higher one, and builds the
// mail indexes of a store of version 1 (buildIndexesTx).
const schemaVersion = 2

func createBuckets(tx *bbolt.Tx) error {
	for _, name := range allBuckets {
		if _, err := tx.CreateBucketIfNotExists(name); err != nil {
			return err
		}
	}
	m := tx.Bucket(bucketMeta)
	if v := m.Get(metaSchema); v != nil {
		if len(v) != 8 {
			return fmt.Errorf("%w: schema version", api.ErrCorrupt)
		}
		got := binary.BigEndian.Uint64(v)
		if got > schemaVersion {
			return fmt.Errorf("%w: version %d, this binary knows %d", api.ErrSchema, got, schemaVersion)
		}
		if got == schemaVersion {
			return nil
		}
		if err := buildIndexesTx(tx); err != nil {
			return fmt.Errorf("upgrade store to schema %d: %w", schemaVersion, err)
		}
	}
	return m.Put(metaSchema, binary.BigEndian.AppendUint64(nil, schemaVersion))
}

// key2 is a ‖ 0x00 ‖ b. Names and ids hold no NUL, so a prefix scan of a ‖ 0x00 finds exactly
// a's entries.
func key2(a, b string) []byte {
	k := make([]byte, 0, len(a)+1+len(b))
	k = append(k, a...)
	k = append(k, 0)
	return append(k, b...)
}

func prefix(a string) []byte { return append([]byte(a), 0) }

// timeKey is be64(unix ms with the sign bit flipped) ‖ rest, so byte order is time order.
func timeKey(t time.Time, rest string) []byte {
	k := make([]byte, 8, 8+len(rest))
	binary.BigEndian.PutUint64(k, uint64(t.UnixMilli())^(1<<63))
	return append(k, rest...)
}

func keyTime(k []byte) time.Time {
	return time.UnixMilli(int64(binary.BigEndian.Uint64(k[:8]) ^ (1 << 63))).UTC()
}

func getJSON(b *bbolt.Bucket, key []byte, v any) (bool, error) { return boltjson.Get(b, key, v) }

func putJSON(b *bbolt.Bucket, key []byte, v any) error { return boltjson.Put(b, key, v) }
