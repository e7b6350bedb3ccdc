package host

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.etcd.io/bbolt"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/host/mailstore"
	"github.com/agentmbx/agentmbx/internal/version"
	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/outbox"
)

func isoOrEmpty(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return mbx.ISOTime(t)
}

// apiRow is an outbox row as api.OutboxRow.
func apiRow(r outbox.Row) api.OutboxRow {
	return api.OutboxRow{
		MsgID: r.MsgID, Host: r.Host, Kind: r.Kind.String(), State: r.State.String(),
		Transport: r.Transport.String(), Attempts: r.Attempts, NextAt: isoOrEmpty(r.NextAt),
		LastError: r.LastError, Relay: r.Relay, Epoch: r.Epoch, Seq: r.Seq,
		AcceptedAt: isoOrEmpty(r.AcceptedAt), Deadline: isoOrEmpty(r.Deadline),
		Reason: r.Reason, EndedAt: isoOrEmpty(r.EndedAt), RelayV1At: isoOrEmpty(r.RelayV1At),
		LANUnsignedAt: isoOrEmpty(r.LANUnsignedAt),
	}
}

// Sent shows the per-recipient delivery state of a message this host sent: local recipients
// from their mailboxes, remote ones from the delivery receipts (queued until one arrives), and
// the message's outbox rows.
func (h *Host) Sent(ctx context.Context, id string) (api.Sent, error) {
	if err := ctx.Err(); err != nil {
		return api.Sent{}, err
	}
	if !mbx.ValidULID(id) {
		return api.Sent{}, fmt.Errorf("host: sent: %w: message id %q", api.ErrInvalid, id)
	}
	var out api.Sent
	var rows []outbox.Row
	err := h.db.View(func(tx *bbolt.Tx) error {
		var rec sentRecord
		found, err := getJSON(tx.Bucket(bucketSent), []byte(id), &rec)
		if err != nil {
			return err
		}
		if !found {
			return fmt.Errorf("message %s: %w (this host did not send it)", id, api.ErrNotFound)
		}
		out = api.Sent{ID: rec.ID, Subject: rec.Subject, From: rec.From + "@" + h.name, Recipients: []api.Recipient{}}
		for _, a := range rec.Local {
			e, _, err := mailstore.CopyTx(tx, a, id)
			if err != nil {
				return err
			}
			out.Recipients = append(out.Recipients, api.Recipient{Recipient: a + "@" + h.name, Host: h.name,
				State: e.State.String(), At: e.At, Note: e.Note})
		}
		byHost := map[string][]api.Recipient{}
		p := prefix(id)
		c := tx.Bucket(bucketRState).Cursor()
		for k, v := c.Seek(p); k != nil && bytes.HasPrefix(k, p); k, v = c.Next() {
			var r rstateRecord
			if _, err := getJSON(tx.Bucket(bucketRState), k, &r); err != nil {
				return err
			}
			_ = v
			byHost[r.Host] = append(byHost[r.Host], api.Recipient{Recipient: string(k[len(p):]), Host: r.Host,
				State: r.State.String(), At: r.At, Note: r.Note})
		}
		for _, host := range rec.Hosts {
			rs := byHost[host]
			for _, n := range rec.Named[host] {
				if !slices.ContainsFunc(rs, func(r api.Recipient) bool { return r.Recipient == n+"@"+host }) {
					rs = append(rs, api.Recipient{Recipient: n + "@" + host, Host: host, State: "queued"})
				}
			}
			if len(byHost[host]) == 0 {
				for _, a := range rec.To {
					if pa, err := mbx.ParseAddress(a); err == nil && (pa.Kind == mbx.AddrName || pa.Kind == mbx.AddrRole || pa.Kind == mbx.AddrBroadcast) {
						rs = append(rs, api.Recipient{Recipient: a + "@" + host, Host: host, State: "queued"})
					}
				}
			}
			slices.SortFunc(rs, func(a, b api.Recipient) int { return strings.Compare(a.Recipient, b.Recipient) })
			out.Recipients = append(out.Recipients, rs...)
		}
		rows, err = h.ob.In(tx).ByItem(id)
		return err
	})
	if err == nil {
		out.Rows, err = h.withWaiting(rows)
	}
	if err != nil {
		return api.Sent{}, fmt.Errorf("host: sent: %w", err)
	}
	return out, nil
}

// Outbox lists every outbox row (envelopes and receipts, active and ended until pruned), with
// the reason each active row waits.
func (h *Host) Outbox(ctx context.Context) ([]api.OutboxRow, error) {
	rows, err := h.ob.List(ctx, outbox.Filter{})
	if err != nil {
		return nil, fmt.Errorf("host: outbox: %w", err)
	}
	out, err := h.withWaiting(rows)
	if err != nil {
		return nil, fmt.Errorf("host: outbox: %w", err)
	}
	return out, nil
}

// Status describes the host.
func (h *Host) Status(ctx context.Context) (api.Status, error) {
	if err := ctx.Err(); err != nil {
		return api.Status{}, err
	}
	st := api.Status{Host: h.name, HostPubkey: h.key.PublicKey(), Fingerprint: h.key.Fingerprint(), Version: version.String()}
	h.mu.Lock()
	st.Listen, st.Daemon = h.listen, h.daemon
	h.mu.Unlock()
	st.Reach = h.reachStatus()
	bound, _, bindErr := h.lanBound()
	if bound != "" {
		st.Listen = bound
	}
	st.LANError = bindErr
	err := h.db.View(func(tx *bbolt.Tx) error {
		st.Peers = tx.Bucket(bucketPeers).Stats().KeyN
		st.Agents = tx.Bucket(bucketAgents).Stats().KeyN
		rows, err := h.ob.In(tx).List(outbox.Filter{Active: true})
		if err != nil {
			return err
		}
		st.OutboxDue = len(rows)
		st.LANAlerts, err = lanAlertsTx(tx)
		return err
	})
	if err != nil {
		return api.Status{}, fmt.Errorf("host: status: %w", err)
	}
	if st.Rotation, err = h.rot.Status(); err != nil {
		return api.Status{}, fmt.Errorf("host: status: %w", err)
	}
	return st, nil
}
