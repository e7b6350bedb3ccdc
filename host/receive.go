package host

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.etcd.io/bbolt"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/host/mailstore"
	"github.com/agentmbx/agentmbx/internal/logkey"
	"github.com/agentmbx/agentmbx/mbx"
)

// SeenRetention is how long the id of a received message is kept for dedup: well past the relay's
// retention (14 days) plus its dedup grace (7 days) and the sender's own deadlines, so a repeat
// delivery after any retry or relay restore is recognized.
const SeenRetention = 60 * 24 * time.Hour

// Rejection reasons for received envelopes (after "rejected:"). The texts are the original's
// where it had one.
const (
	ReasonSenderMismatch = "sender host mismatch"
	ReasonBadSignature   = "bad signature"
	ReasonUndecryptable  = "undecryptable body"
	ReasonNotSealed      = "envelope is not sealed"
	ReasonIDConflict     = "message id already used by another message"
	ReasonUnpaired       = "host not paired"
)

// incoming is an envelope from a peer that passed every check that needs no store: shape,
// sending host, signature and opening. commitEnvelopeTx stores it.
type incoming struct {
	Peer PeerRecord
	Env  *mbx.Envelope // the stored form: body in plaintext
	msg  mailstore.Message
}

// rejectedError is a refusal of a received item; Reason is what follows "rejected:".
type rejectedError struct{ Reason string }

func (e *rejectedError) Error() string { return mbx.StatusRejectedPrefix + e.Reason }

// rejected reports whether err is a refusal and returns the status string for it.
func rejected(err error) (string, bool) {
	var r *rejectedError
	if errors.As(err, &r) {
		return r.Error(), true
	}
	return "", false
}

func reject(reason string) error { return &rejectedError{Reason: reason} }

// prepareEnvelope runs the checks of a received envelope that need no store, in the original's
// order: shape, then the sending host (sig.host and the host of from must be the peer's), then the
// signature by the peer's pinned key (or a retired key, chosen by sig.key), then the body is
// opened with this host's current enc key and then its retired ones. sealed requires an enc (the
// relay path and LAN v2); LAN v1 accepts a signed plaintext envelope as 0.5.x sent it. via
// (api.ViaLAN, api.ViaRelay) and the fingerprint of the key that verified the signature are
// stored with the message. A refusal is a *rejectedError.
func (h *Host) prepareEnvelope(peer PeerRecord, wire []byte, sealed bool, via string) (*incoming, error) {
	env, err := mbx.ParseEnvelope(wire)
	if err != nil {
		var se *mbx.ShapeError
		if errors.As(err, &se) {
			return nil, reject(se.Reason)
		}
		return nil, reject("bad envelope")
	}
	key := peer.HostPubkey
	if env.Sig != nil {
		if k := peer.KeyFor(env.Sig.Key); k != "" {
			key = k
		}
	}
	if err := env.Verify(peer.Host, key); err != nil {
		if errors.Is(err, mbx.ErrSenderMismatch) {
			return nil, reject(ReasonSenderMismatch)
		}
		return nil, reject(ReasonBadSignature)
	}
	if env.Enc == nil && sealed {
		return nil, reject(ReasonNotSealed)
	}
	body, err := env.Open(append([]mbx.EncKey{h.enc}, h.retired...)...)
	if err != nil {
		return nil, reject(ReasonUndecryptable)
	}
	replyTo := ""
	if env.ReplyTo != nil {
		replyTo = *env.ReplyTo
	}
	in := &incoming{Peer: peer, Env: env, msg: mailstore.Message{
		ID: env.ID, TS: env.TS, From: env.From, To: slices.Clone(env.To), Subject: env.Subject, Body: body,
		Kind: string(env.Kind), Thread: env.Thread, ReplyTo: replyTo, Refs: slices.Clone(env.Refs),
		NeedsReply: env.NeedsReply, Origin: peer.Host, Via: via, Key: mbx.Fingerprint(key),
	}}
	return in, nil
}

// seenRecord is a seen bucket value.
type seenRecord struct {
	Host string `json:"host"`
	At   string `json:"at"`
}

// commitEnvelopeTx stores a prepared envelope inside tx: the dedup check by message id (a repeat
// from the same host is a duplicate and changes nothing), the local expansion of its addresses,
// the mailbox copies (delivered, each with its delivered receipt queued for the sender) and the
// dedup mark, all in tx. It returns mbx.StatusAccepted or mbx.StatusDuplicate, or a *rejectedError
// (nothing written) when another message already has the id. Any other error is the store's.
func (h *Host) commitEnvelopeTx(tx *bbolt.Tx, in *incoming) (string, error) {
	id := in.msg.ID
	var seen seenRecord
	found, err := getJSON(tx.Bucket(bucketSeen), []byte(id), &seen)
	if err != nil {
		return "", err
	}
	if mailstore.SkipDedup() {
		found = false // the oracles' self-tests: a repeat goes on as if it were new
	}
	if found {
		if seen.Host == in.Peer.Host {
			return mbx.StatusDuplicate, nil
		}
		return "", reject(ReasonIDConflict)
	}
	if prior, found, err := mailstore.MessageTx(tx, id); err != nil {
		return "", err
	} else if found && !mailstore.SkipDedup() {
		if prior.Origin == in.Peer.Host {
			return mbx.StatusDuplicate, nil // its dedup mark was pruned, the message is still here
		}
		return "", reject(ReasonIDConflict)
	}
	now := h.clock()
	agents, err := h.expandIncomingTx(tx, in.msg.To)
	if err != nil {
		return "", err
	}
	if len(agents) > 0 {
		if err := h.mail.DeliverTx(tx, &in.msg, agents, now); err != nil {
			return "", err
		}
	}
	if err := putJSON(tx.Bucket(bucketSeen), []byte(id), seenRecord{Host: in.Peer.Host, At: mbx.ISOTime(now)}); err != nil {
		return "", err
	}
	if err := tx.Bucket(bucketSeenAt).Put(timeKey(now, id), nil); err != nil {
		return "", err
	}
	h.log.Debug("envelope received", logkey.Msg, id, logkey.Peer, in.Peer.Host, logkey.Local, len(agents))
	return mbx.StatusAccepted, nil
}

// expandIncomingTx finds this host's recipients among the addresses of a received envelope:
// name@thishost (registered on first use; owner@thishost is the owner), bare names of existing
// local agents, role:<role> (the local agents with that role) and * (every local agent). Addresses
// of other hosts and the sender's own "owner" are not ours. The result is sorted and unique.
// (mbx.LocalRecipients differs on purpose: it would deliver "owner" here and take bare names of
// agents this host does not have.)
func (h *Host) expandIncomingTx(tx *bbolt.Tx, to []string) ([]string, error) {
	agents, err := agentsTx(tx)
	if err != nil {
		return nil, err
	}
	var out []string
	add := func(n string) {
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	for _, raw := range to {
		a, err := mbx.ParseAddress(raw)
		if err != nil {
			continue // the shape check passed it; an address we cannot read is not ours
		}
		switch a.Kind {
		case mbx.AddrAgent:
			if a.Host == h.name && a.Name != AgentMBX {
				add(a.Name)
			}
		case mbx.AddrName:
			for _, ag := range agents {
				if ag.Name == a.Name {
					add(a.Name)
				}
			}
		case mbx.AddrRole:
			for _, ag := range agents {
				if ag.Role == a.Role {
					add(ag.Name)
				}
			}
		case mbx.AddrBroadcast:
			for _, ag := range agents {
				add(ag.Name)
			}
		case mbx.AddrOwner:
			// the sender's own owner: delivered on the sending host
		}
	}
	slices.Sort(out)
	return out, nil
}

// receiveEnvelope is the whole receive path for one envelope from a pinned peer (the relay checkpoint
// runs prepareEnvelope and commitEnvelopeTx itself, to commit with its checkpoint): it returns
// "accepted", "duplicate" or "rejected:<reason>". An error means the store failed and nothing was
// stored; the sender should retry.
func (h *Host) receiveEnvelope(ctx context.Context, fromHost string, wire []byte, sealed bool) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	peer, err := h.peerRecord(fromHost)
	if errors.Is(err, api.ErrUnpaired) {
		return mbx.StatusRejectedPrefix + ReasonUnpaired, nil
	} else if err != nil {
		return "", err
	}
	sts, err := h.receiveBatch(peer, [][]byte{wire}, sealed)
	if err != nil {
		return "", err
	}
	return sts[0], nil
}

// receiveBatch prepares every envelope (from the LAN), then commits them all in one transaction,
// and wakes the outbox (receipts were queued) after the commit; the mail store wakes the waiters.
func (h *Host) receiveBatch(peer PeerRecord, wires [][]byte, sealed bool) ([]string, error) {
	sts := make([]string, len(wires))
	ins := make([]*incoming, len(wires))
	for i, w := range wires {
		in, err := h.prepareEnvelope(peer, w, sealed, api.ViaLAN)
		if err != nil {
			sts[i], _ = rejected(err)
			continue
		}
		ins[i] = in
	}
	err := h.db.Update(func(tx *bbolt.Tx) error {
		// The peer may have been unpinned since it was looked up: nothing from an unpaired host.
		if _, err := peerTx(tx, peer.Host); err != nil {
			return err
		}
		if _, err := h.ob.In(tx).MakeDue(peer.Host); err != nil {
			return err
		}
		for i, in := range ins {
			if in == nil {
				continue
			}
			st, err := h.commitEnvelopeTx(tx, in)
			if err != nil {
				if s, ok := rejected(err); ok {
					sts[i] = s
					continue
				}
				return err
			}
			sts[i] = st
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	h.kickOutbox()
	return sts, nil
}

// pruneSeen deletes dedup marks older than SeenRetention, at most limit of them.
func (h *Host) pruneSeen(limit int) (int, error) {
	cut := h.clock().Add(-SeenRetention)
	n := 0
	err := h.db.Update(func(tx *bbolt.Tx) error {
		n = 0
		idx, seen := tx.Bucket(bucketSeenAt), tx.Bucket(bucketSeen)
		c := idx.Cursor()
		var dead [][]byte
		for k, _ := c.First(); k != nil && len(dead) < limit; k, _ = c.Next() {
			if len(k) < 8 || !keyTime(k).Before(cut) {
				break
			}
			dead = append(dead, append([]byte(nil), k...))
		}
		for _, k := range dead {
			if err := seen.Delete(k[8:]); err != nil {
				return err
			}
			if err := idx.Delete(k); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("host: prune seen: %w", err)
	}
	return n, nil
}
