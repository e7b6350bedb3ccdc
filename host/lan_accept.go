package host

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"go.etcd.io/bbolt"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/internal/logkey"
	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/outbox"
)

// Signed LAN acceptance, the sender's side (docs/design.md: Choosing a transport; the statement
// is mbx.LANAccept). A LAN row ends done only on the peer's LAN accept statement signed by the
// key this host pinned for it (lan.Transport checks it: OutcomeDelivered). An answer that says
// it stored the item without one (OutcomeLANUnsigned) is no delivery, and the host tells two
// cases apart:
//
//   - The peer is known to sign: once a valid statement came from its pinned key, this host
//     records that (meta "lansigner:<host>" = that key). An unsigned answer then, or a statement
//     the pinned key did not make (always), means something else answers at the peer's address
//     (another machine got its DHCP lease, or someone answers on purpose): the attempt failed
//     (the row stays pending on the normal schedule, and after two such failures goes to the
//     relay when one is set), and the peer gets a LAN alert (meta "lanalert:<host>") that status
//     and doctor show: api.LANAlertSummary. A valid statement clears it.
//   - A peer never heard signing is taken for one that cannot (AgentMBX 0.5.x, or an agentmbx
//     build before signed answers): outbox.MarkLANUnsigned keeps the envelope row pending,
//     marked lan_unsigned_at, sent again on its backoff until the peer's signed delivery receipt
//     settles it or its deadline ends it with an alert. Such a peer is never told apart from a
//     stranger at its address by the answer itself, so nothing unsigned ever ends a row done.

// lanSignerKey is the meta key recording the pinned key of host that signed a LAN answer.
func lanSignerKey(host string) []byte { return []byte("lansigner:" + host) }

// lanAlertKey is the meta key of host's LAN alert (lanAlertRecord).
func lanAlertKey(host string) []byte { return []byte("lanalert:" + host) }

// lanAlertRecord is a stored LAN alert.
type lanAlertRecord struct {
	HostPubkey string `json:"host_pubkey"` // the pinned key the answers lack
	Addr       string `json:"addr"`
	Since      string `json:"since"`
	Last       string `json:"last"`
	Error      string `json:"error"`
}

// lanSigned records in tx that host answered with a valid statement from its pinned key:
// the key signs, and its LAN alert (if any) is cleared.
func (h *Host) lanSignedTx(tx *bbolt.Tx, host string) error {
	p, err := peerTx(tx, host)
	if err != nil {
		return nil // unpinned meanwhile: nothing to learn
	}
	meta := tx.Bucket(bucketMeta)
	if !bytes.Equal(meta.Get(lanSignerKey(host)), []byte(p.HostPubkey)) {
		if err := meta.Put(lanSignerKey(host), []byte(p.HostPubkey)); err != nil {
			return err
		}
	}
	if meta.Get(lanAlertKey(host)) != nil {
		h.log.Info("LAN alert cleared: the peer's signed answer came again", logkey.Peer, host)
		return meta.Delete(lanAlertKey(host))
	}
	return nil
}

// lanUnsignedTx records in tx an OutcomeLANUnsigned for row r of host: a failed attempt and a
// LAN alert when host is known to sign or the statement did not verify, else the unsigned mark.
func (h *Host) lanUnsignedTx(tx *bbolt.Tx, host string, r outbox.Row, o outbox.Outcome) (outbox.Row, error) {
	ob := h.ob.In(tx)
	p, err := peerTx(tx, host)
	if err != nil {
		// Unpinned meanwhile (or unreadable): no delivery, nobody to alert about.
		return ob.MarkAttemptFailed(r.Key(), outbox.TransportLAN, o.Err)
	}
	signs := bytes.Equal(tx.Bucket(bucketMeta).Get(lanSignerKey(host)), []byte(p.HostPubkey))
	if !o.BadStatement && !signs {
		return ob.MarkLANUnsigned(r.Key())
	}
	row, err := ob.MarkAttemptFailed(r.Key(), outbox.TransportLAN, fmt.Errorf("%s: %w", api.LANAlertSummary, o.Err))
	if err != nil {
		return row, err
	}
	return row, h.lanAlertTx(tx, p, o.Err.Error())
}

// lanAlertTx raises (or refreshes) the LAN alert of peer p.
func (h *Host) lanAlertTx(tx *bbolt.Tx, p PeerRecord, why string) error {
	meta := tx.Bucket(bucketMeta)
	now := mbx.ISOTime(h.clock())
	var a lanAlertRecord
	found, err := getJSON(meta, lanAlertKey(p.Host), &a)
	if err != nil {
		return err
	}
	if !found || a.HostPubkey != p.HostPubkey {
		a = lanAlertRecord{HostPubkey: p.HostPubkey, Since: now}
		h.log.Warn("LAN alert: the peer's address answers without its pinned key's signature: rows stay pending",
			logkey.Peer, p.Host, logkey.Addr, p.Addr, logkey.Err, why)
	}
	a.Addr, a.Last, a.Error = p.Addr, now, clipError(why, 300)
	return putJSON(meta, lanAlertKey(p.Host), a)
}

// lanAlertsTx lists the LAN alerts of the peers still pinned with the key the alert is for.
func lanAlertsTx(tx *bbolt.Tx) ([]api.LANAlert, error) {
	var out []api.LANAlert
	prefix := lanAlertKey("")
	c := tx.Bucket(bucketMeta).Cursor()
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
		host := string(k[len(prefix):])
		var a lanAlertRecord
		if _, err := getJSON(tx.Bucket(bucketMeta), k, &a); err != nil {
			return nil, err
		}
		if p, err := peerTx(tx, host); err != nil || p.HostPubkey != a.HostPubkey {
			continue // unpinned or pinned again since: the alert is moot
		}
		out = append(out, api.LANAlert{Host: host, Fingerprint: mbx.Fingerprint(a.HostPubkey), Addr: a.Addr,
			Since: a.Since, Last: a.Last, Error: a.Error})
	}
	slices.SortFunc(out, func(a, b api.LANAlert) int { return strings.Compare(a.Host, b.Host) })
	return out, nil
}

// lanAlerts lists the LAN alerts (lanAlertsTx).
func (h *Host) lanAlerts() ([]api.LANAlert, error) {
	var out []api.LANAlert
	err := h.db.View(func(tx *bbolt.Tx) error {
		var err error
		out, err = lanAlertsTx(tx)
		return err
	})
	return out, err
}

// clipError cuts an error text to at most n bytes, at a character boundary, ending in "…" when
// cut.
func clipError(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
