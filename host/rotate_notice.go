package host

import (
	"errors"

	"go.etcd.io/bbolt"

	"github.com/agentmbx/agentmbx/inbox"
	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/quarantine"
)

// handleRotationNotice is the relay receive path of a peer's rotation notice (mbx rotation
// notices): it is opened with this host's enc keys and applied in the receive transaction
// (applyRotationTx). An applied notice or a replay is accepted; anything refused goes to the
// quarantine with its reason, and nothing else changes.
func (h *Host) handleRotationNotice(tx *bbolt.Tx, itemID, sender string, wire []byte) (inbox.Verdict, error) {
	signed, err := mbx.OpenRotationNotice(wire, itemID, append([]mbx.EncKey{h.enc}, h.retired...)...)
	if errors.Is(err, mbx.ErrUndecryptable) {
		return inbox.Rejected(quarantine.CauseUndecryptable, ReasonUndecryptable), nil
	} else if err != nil {
		return inbox.Rejected(quarantine.CauseMalformed, clip(err.Error(), 200)), nil
	}
	out, released, err := h.applyRotationTx(tx, signed, sender)
	if errors.Is(err, ErrRotationRefused) {
		cause := quarantine.CauseRefused
		if _, paired, _ := senderPeerTx(tx, sender); !paired {
			cause = quarantine.CauseUnpaired
		}
		return inbox.Rejected(cause, clip(err.Error(), 200)), nil
	} else if err != nil {
		return inbox.Verdict{}, err
	}
	tx.OnCommit(func() { h.afterRotation(out, released) })
	if !out.Applied {
		return inbox.Duplicate(), nil
	}
	return inbox.Accepted(), nil
}
