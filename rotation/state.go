package rotation

import (
	"encoding/json"
	"fmt"
	"slices"

	"go.etcd.io/bbolt"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/mbx"
)

// The stored rotation: bucket "rotation", key "current", one JSON State.
var (
	bucketRotation = []byte("rotation")
	rotationKey    = []byte("current")
)

// Steps of the local part.
const (
	stepPrepared = "prepared"
	stepSwapped  = "swapped"
)

// State is the stored rotation: the signed record, the local step, and the progress at the
// relay and at each peer. Done is set when every step is.
type State struct {
	Signed  mbx.SignedRotation       `json:"signed"`
	Step    string                   `json:"step"`
	Started string                   `json:"started"`
	Relay   *RelayProgress           `json:"relay,omitempty"`
	Peers   map[string]*PeerProgress `json:"peers"`
	Done    string                   `json:"done,omitempty"`
}

// RelayProgress is the progress at the relay pinned when the rotation started.
type RelayProgress struct {
	URL       string `json:"url"`
	RelayKey  string `json:"relay_pubkey"`
	Noticed   string `json:"noticed,omitempty"` // every notice answered
	Rotated   string `json:"rotated,omitempty"` // the relay moved the queue
	Moved     int64  `json:"moved"`
	Reset     string `json:"reset,omitempty"`   // receive position reset
	Checked   string `json:"checked,omitempty"` // publications confirmed under the new key
	Note      string `json:"note,omitempty"`
	LastError string `json:"last_error,omitempty"`
}

// PeerProgress is the progress of one peer.
type PeerProgress struct {
	LAN       string `json:"lan,omitempty"`    // "applied", "had it", "refused: …"
	Notice    string `json:"notice,omitempty"` // "accepted", "duplicate", "rejected: …"
	LastError string `json:"last_error,omitempty"`
	Attempts  int    `json:"attempts,omitempty"`
}

func (r *RelayProgress) relayDone() bool { return r == nil || r.Checked != "" }

// gating reports whether the relay must not be used otherwise yet.
func (r *RelayProgress) gating() bool { return r != nil && r.Reset == "" }

// Noticed reports whether the relay holds the peer's notice.
func (p *PeerProgress) Noticed() bool { return p.Notice == "accepted" || p.Notice == "duplicate" }

// loadTx reads the stored rotation in tx (nil when there never was one).
func loadTx(tx *bbolt.Tx) (*State, error) {
	b := tx.Bucket(bucketRotation)
	if b == nil {
		return nil, nil
	}
	raw := b.Get(rotationKey)
	if raw == nil {
		return nil, nil
	}
	var s State
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, fmt.Errorf("%w: %s %q: %v", ErrCorrupt, "record", rotationKey, err)
	}
	if s.Peers == nil {
		s.Peers = map[string]*PeerProgress{}
	}
	return &s, nil
}

func saveTx(tx *bbolt.Tx, s *State) error {
	b, err := tx.CreateBucketIfNotExists(bucketRotation)
	if err != nil {
		return err
	}
	raw, err := json.Marshal(s)
	if err != nil {
		return err
	}
	return b.Put(rotationKey, raw)
}

// load reads the stored rotation from db.
func load(db *bbolt.DB) (*State, error) {
	var st *State
	err := db.View(func(tx *bbolt.Tx) error {
		var err error
		st, err = loadTx(tx)
		return err
	})
	return st, err
}

// update changes the stored rotation in one transaction.
func update(db *bbolt.DB, fn func(tx *bbolt.Tx, st *State) error) error {
	return db.Update(func(tx *bbolt.Tx) error {
		st, err := loadTx(tx)
		if err != nil {
			return err
		}
		if st == nil {
			return fmt.Errorf("%w: no rotation stored", ErrCorrupt)
		}
		if err := fn(tx, st); err != nil {
			return err
		}
		return saveTx(tx, st)
	})
}

// peerNames are the names of st's peers, sorted.
func (st *State) peerNames() []string {
	var out []string
	for n := range st.Peers {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// API is the progress as api.Rotation.
func (st *State) API() *api.Rotation {
	out := &api.Rotation{OldFingerprint: mbx.Fingerprint(st.Signed.Rec.OldPub), NewFingerprint: mbx.Fingerprint(st.Signed.Rec.NewPub),
		Started: st.Started, Done: st.Done, Peers: []api.RotationPeer{}}
	if r := st.Relay; r != nil {
		out.Relay = &api.RotationRelay{URL: r.URL, Noticed: r.Noticed, Rotated: r.Rotated, Moved: r.Moved, Reset: r.Reset,
			Checked: r.Checked, Note: r.Note, LastError: r.LastError}
	}
	for _, n := range st.peerNames() {
		p := st.Peers[n]
		out.Peers = append(out.Peers, api.RotationPeer{Host: n, LAN: p.LAN, Notice: p.Notice, LastError: p.LastError, Attempts: p.Attempts})
	}
	return out
}

// clip shortens outside input for an error message.
func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
