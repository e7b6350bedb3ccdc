package host

import (
	"context"

	"go.etcd.io/bbolt"

	"github.com/agentmbx/agentmbx/internal/logkey"
	"github.com/agentmbx/agentmbx/outbox"
)

// Flush on recovery. When a link answers again (a peer's LAN delivery succeeds, the relay
// accepts a push or answers a pull), the rows that wait in backoff on that link become due at
// once, instead of each waiting out its own backoff (up to an hour). A link's state is kept in
// memory: it is unknown after a start, up after a flush that moved fewer rows than flushBurst,
// and down after an attempt on it of which every row failed. A link flushes when it answers and
// is not known up, at most flushBurst rows at a time, soonest due first; while more remain it
// stays "not up", so each later answer flushes the next burst.

// flushBurst bounds the rows one recovery makes due (the pass limits then bound what is sent).
const flushBurst = 500

// relayLinkKey names the relay link; a peer's LAN link is "lan:" + host.
const relayLinkKey = "relay"

func linkOf(tr outbox.Transport, host string) string {
	if tr == outbox.TransportRelay {
		return relayLinkKey
	}
	return "lan:" + host
}

// linkAnswered reports whether an attempt's outcomes show the link working (a row delivered or
// relay-accepted) and whether they show it silent (every row failed to get an answer).
func linkAnswered(out []outbox.Outcome) (answered, silent bool) {
	silent = len(out) > 0
	for _, o := range out {
		switch o.Kind {
		case outbox.OutcomeDelivered, outbox.OutcomeRelayAccepted:
			answered = true
		}
		if o.Kind != outbox.OutcomeFailed {
			silent = false
		}
	}
	return answered, silent
}

// unreachable reports whether no row of an attempt got any answer.
func unreachable(out []outbox.Outcome) bool {
	for _, o := range out {
		if !o.Unreachable {
			return false
		}
	}
	return len(out) > 0
}

func (h *Host) setLinkUp(link string, up bool) {
	h.mu.Lock()
	h.linkUp[link] = up
	h.mu.Unlock()
}

func (h *Host) isLinkUp(link string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.linkUp[link]
}

// flushTx makes the rows waiting on link due now, within tx, when the link is not known up: the
// relay's rows (those whose last attempt went to the relay) or the peer's. The link counts as up
// once the transaction commits, unless a full burst leaves more behind.
func (h *Host) flushTx(tx *bbolt.Tx, link string, tr outbox.Transport, host string) error {
	if h.isLinkUp(link) {
		return nil
	}
	f := outbox.FlushFilter{Host: host, Limit: flushBurst}
	if link == relayLinkKey {
		f = outbox.FlushFilter{Transport: outbox.TransportRelay, Limit: flushBurst}
	}
	n, err := h.ob.In(tx).Flush(f)
	if err != nil {
		return err
	}
	tx.OnCommit(func() {
		h.setLinkUp(link, n < flushBurst)
		if n > 0 {
			h.log.Info("link answers again: waiting outbox rows due now", logkey.Link, link, logkey.Count, n)
			h.kickOutbox()
		}
	})
	return nil
}

// relayAnswered flushes the relay link's waiting rows after a successful pull, in a
// transaction of its own (none when the link is known up).
func (h *Host) relayAnswered(ctx context.Context) {
	if h.isLinkUp(relayLinkKey) || ctx.Err() != nil {
		return
	}
	if err := h.db.Update(func(tx *bbolt.Tx) error {
		return h.flushTx(tx, relayLinkKey, outbox.TransportRelay, "")
	}); err != nil {
		h.log.Warn("flushing the relay's waiting outbox rows", logkey.Err, err)
	}
}
