package host

// Read-only views of the store that `agentmbx doctor` needs and the api types carry.

import (
	"go.etcd.io/bbolt"

	"github.com/agentmbx/agentmbx/relaylink"
)

// sendersCurrentTx reports whether the sender allowlist last published at the relay s names
// exactly the peers pinned now (and was published in the epoch last seen).
func sendersCurrentTx(tx *bbolt.Tx, s *relayState) (bool, error) {
	if s.Senders == nil {
		return false, nil
	}
	peers, err := peersTx(tx)
	if err != nil {
		return false, err
	}
	keys := make([]string, len(peers))
	for i, p := range peers {
		keys[i] = p.HostPubkey
	}
	_, hash := relaylink.AllowList(keys)
	return s.Senders.Hash == hash && s.Senders.Epoch == s.Epoch, nil
}
