package relaylink

import (
	"encoding/json"
	"fmt"

	"go.etcd.io/bbolt"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/relayclient"
)

// The relay record. The owner pins one relay (Set: its URL and its relay key). Everything the host
// learns about it lives in one record (bucket "relay", key "state" of the host's store), reset when
// the pin changes: the epoch last seen, the limits, the enrolment cache, the last enc-key ad and
// sender allowlist published, a served key that differed from the pin, and the last failure of
// each operation. A served key other than the pinned one stops all relay use until the owner
// confirms the new key with Set.

var (
	bucketRelay = []byte("relay")
	recordKey   = []byte("state")
)

// Record is the relay bucket's record: the pinned relay and what the host knows of it.
type Record struct {
	URL      string `json:"url"`
	RelayKey string `json:"relay_pubkey"`
	PinnedAt string `json:"pinned_at"`
	TOFU     bool   `json:"tofu,omitempty"`
	// CA is the PEM bundle of a private CA trusted for the relay's certificate ("" for none).
	CA string `json:"ca,omitempty"`
	// TokenFile holds the account token to enrol with ("" for $MBX_RELAY_TOKEN or none).
	TokenFile string `json:"token_file,omitempty"`

	// V1 is set for a relay the owner accepted although it speaks only the v1 API (relay set
	// --allow-v1): it has no key (RelayKey is ""), no epoch and no accept statements.
	V1 bool `json:"v1,omitempty"`
	// V2 is set when a relay pinned as v1 was last seen answering v2: the key it served, for
	// the owner to pin (relay set --key). Cleared when it answers v1 only again.
	V2 *api.RelayV2Seen `json:"v2,omitempty"`

	// Epoch is the relay epoch last seen in an info, push or pull answer ("" before any).
	Epoch string `json:"epoch,omitempty"`
	// KeyChange is set when the relay served another key: relay use is stopped.
	KeyChange *api.RelayKeyChange `json:"key_change,omitempty"`

	// Published is what the keeper learned: limits, the enrolment cache, the publications.
	Published

	Problems map[string]api.RelayProblem `json:"problems,omitempty"`
}

// Pin is the pinned relay.
func (s *Record) Pin() relayclient.Pin {
	return relayclient.Pin{URL: s.URL, RelayKey: s.RelayKey}
}

// LimitsOrDefault are the relay's announced limits (mbx.DefaultLimits before any).
func (s *Record) LimitsOrDefault() mbx.Limits {
	if s.Limits != nil {
		return *s.Limits
	}
	return mbx.DefaultLimits()
}

// enrolledFor reports whether the enrolment cache holds for this relay, epoch and host key.
func (s *Record) enrolledFor(epoch, hostKey string) bool {
	return s.Enrolled.EnrolledFor(s.Pin(), epoch, hostKey)
}

// LoadTx reads the relay record in tx (nil when no relay is pinned).
func LoadTx(tx *bbolt.Tx) (*Record, error) {
	b := tx.Bucket(bucketRelay)
	if b == nil {
		return nil, nil
	}
	raw := b.Get(recordKey)
	if raw == nil {
		return nil, nil
	}
	var s Record
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, fmt.Errorf("%w: record %q: %v", errCorrupt, recordKey, err)
	}
	return &s, nil
}

func saveTx(tx *bbolt.Tx, s *Record) error {
	b, err := tx.CreateBucketIfNotExists(bucketRelay)
	if err != nil {
		return err
	}
	if s == nil {
		return b.Delete(recordKey)
	}
	raw, err := json.Marshal(s)
	if err != nil {
		return err
	}
	return b.Put(recordKey, raw)
}

// Record reads the relay record (nil when no relay is pinned).
func (l *Link) Record() (*Record, error) { return l.load() }

// load reads the relay record (nil when no relay is pinned).
func (l *Link) load() (*Record, error) {
	var s *Record
	err := l.db.View(func(tx *bbolt.Tx) error {
		var err error
		s, err = LoadTx(tx)
		return err
	})
	return s, err
}

// update changes the record of the relay pin in one transaction; fn is not called when another
// relay (or none) is pinned meanwhile. It reports whether fn ran.
func (l *Link) update(pin relayclient.Pin, fn func(tx *bbolt.Tx, s *Record) error) (bool, error) {
	ran := false
	err := l.db.Update(func(tx *bbolt.Tx) error {
		ran = false
		s, err := LoadTx(tx)
		if err != nil || s == nil || s.URL != pin.URL || s.RelayKey != pin.RelayKey {
			return err
		}
		if err := fn(tx, s); err != nil {
			return err
		}
		ran = true
		return saveTx(tx, s)
	})
	return ran, err
}

// peerKeysTx are the pinned peers' current host keys (the sender allowlist's).
func (l *Link) peerKeysTx(tx *bbolt.Tx) ([]string, error) {
	peers, err := l.host.Peers(tx)
	if err != nil {
		return nil, err
	}
	keys := make([]string, len(peers))
	for i, p := range peers {
		keys[i] = p.Key
	}
	return keys, nil
}

// sendersCurrentTx reports whether the sender allowlist last published at the relay s names
// exactly the peers pinned now (and was published in the epoch last seen).
func (l *Link) sendersCurrentTx(tx *bbolt.Tx, s *Record) (bool, error) {
	if s.Senders == nil {
		return false, nil
	}
	keys, err := l.peerKeysTx(tx)
	if err != nil {
		return false, err
	}
	_, hash := AllowList(keys)
	return s.Senders.Hash == hash && s.Senders.Epoch == s.Epoch, nil
}
