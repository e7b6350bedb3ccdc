package relaylink

import (
	"context"
	"fmt"
	"strings"
	"time"

	"go.etcd.io/bbolt"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/checkpoint"
	"github.com/agentmbx/agentmbx/internal/logkey"
	"github.com/agentmbx/agentmbx/quarantine"
	"github.com/agentmbx/agentmbx/relayclient"
)

var _ api.QuarantineService = (*Link)(nil)

// minPurgeAge is the youngest a purge may reach: a purge of everything held "0 s" is more
// likely a typo than a wish.
const minPurgeAge = time.Minute

// ReleaseQuarantined processes one quarantined item again, in one transaction: accepted, it
// leaves the quarantine (and its mail or receipt takes effect); refused again, it goes back with
// the new cause and reason (api.QuarantineService).
func (l *Link) ReleaseQuarantined(ctx context.Context, req api.QuarantineReleaseRequest) (api.QuarantineRelease, error) {
	if err := ctx.Err(); err != nil {
		return api.QuarantineRelease{}, err
	}
	var out api.QuarantineRelease
	err := l.db.Update(func(tx *bbolt.Tx) error {
		q := l.quar.In(tx)
		id, err := quarantineID(q, req.ID)
		if err != nil {
			return err
		}
		e, err := q.ReleaseID(id)
		if err != nil {
			return err
		}
		rh := handler{l: l, pin: relayclient.Pin{URL: e.Relay}}
		if s, err := LoadTx(tx); err == nil && s != nil && s.Pin().URL == e.Relay {
			rh.pin = s.Pin()
		}
		v, err := rh.handle(tx, checkpoint.Item{Relay: e.Relay, Epoch: e.Epoch, Seq: e.Seq, Kind: e.Kind,
			ItemID: e.ItemID, Sender: e.Sender, Wire: e.Wire})
		if err != nil {
			return err
		}
		out.Accepted = v.Outcome != checkpoint.OutcomeRejected
		if !out.Accepted {
			e.Cause, e.Reason = v.Cause, v.Reason
			if e, _, err = q.Put(e); err != nil {
				return err
			}
		}
		out.Item = quarantineItem(e)
		return nil
	})
	if err != nil {
		return api.QuarantineRelease{}, fmt.Errorf("relay quarantine release: %w", err)
	}
	l.log.Info("quarantined relay item released by the owner", logkey.Item, out.Item.ItemID, logkey.Entry, out.Item.ID,
		logkey.Accepted, out.Accepted, logkey.Reason, out.Item.Reason)
	if out.Accepted {
		l.host.Wake()
	}
	return out, nil
}

// PurgeQuarantined deletes the items quarantined more than req.OlderThan ago (at least a minute)
// and returns them (api.QuarantineService).
func (l *Link) PurgeQuarantined(ctx context.Context, req api.QuarantinePurgeRequest) (api.QuarantinePurge, error) {
	if err := ctx.Err(); err != nil {
		return api.QuarantinePurge{}, err
	}
	if req.OlderThan < minPurgeAge {
		return api.QuarantinePurge{}, fmt.Errorf("relay quarantine purge: %w: --older-than %s is under %s", ErrInvalid, req.OlderThan, minPurgeAge)
	}
	cut := l.clock().Add(-req.OlderThan)
	out := api.QuarantinePurge{Purged: []api.QuarantineItem{}}
	err := l.db.Update(func(tx *bbolt.Tx) error {
		out.Purged = out.Purged[:0]
		q := l.quar.In(tx)
		es, err := q.List(quarantine.Filter{})
		if err != nil {
			return err
		}
		for _, e := range es {
			if !e.At.Before(cut) {
				continue
			}
			if _, err := q.ReleaseID(e.ID); err != nil {
				return err
			}
			out.Purged = append(out.Purged, quarantineItem(e))
		}
		return nil
	})
	if err != nil {
		return api.QuarantinePurge{}, fmt.Errorf("relay quarantine purge: %w", err)
	}
	l.log.Info("quarantined relay items purged by the owner", logkey.Purged, len(out.Purged), logkey.Before, cut)
	return out, nil
}

// quarantineID is the one entry id that begins with prefix (at least 8 hex characters).
func quarantineID(q *quarantine.Tx, prefix string) (string, error) {
	p := strings.ToLower(strings.TrimSpace(prefix))
	if len(p) < 8 || strings.Trim(p, "0123456789abcdef") != "" {
		return "", fmt.Errorf("%w: quarantine id %q: give at least 8 of its hex characters", ErrInvalid, clip(prefix, 80))
	}
	es, err := q.List(quarantine.Filter{})
	if err != nil {
		return "", err
	}
	var ids []string
	for _, e := range es {
		if strings.HasPrefix(e.ID, p) {
			ids = append(ids, e.ID)
		}
	}
	switch len(ids) {
	case 0:
		return "", fmt.Errorf("no quarantined item has an id beginning %s: %w", p, api.ErrNotFound)
	case 1:
		return ids[0], nil
	}
	return "", fmt.Errorf("quarantine id %s is ambiguous: %w: %s", p, api.ErrConflict, strings.Join(ids, ", "))
}

// quarantineItem is an entry as the owner's commands show it (without its peer's name).
func quarantineItem(e quarantine.Entry) api.QuarantineItem {
	return api.QuarantineItem{ID: e.ID, Relay: e.Relay, Epoch: e.Epoch, Seq: e.Seq, ItemID: e.ItemID, Kind: e.Kind,
		Sender: e.Sender, Cause: e.Cause.String(), Reason: e.Reason, Bytes: e.Bytes, At: isoOrEmpty(e.At)}
}
