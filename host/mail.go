package host

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"go.etcd.io/bbolt"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/host/mailstore"
	"github.com/agentmbx/agentmbx/relaylink"
)

// Service is a host as the control socket and the commands use it.
type Service interface {
	api.Service
	api.MailService
	api.OutboxService
	api.RelayService
	api.CardIssuer
	api.EventService
	api.NoticeService
	api.DaemonService
	api.QuarantineService
	api.IDResolver
}

// Service is this host's Service on its store: the mail from the host's mail store (package
// host/mailstore), the relay routes from its relay link (package relaylink), the rest from the
// Host. The daemon serves it on the control socket.
func (h *Host) Service() Service { return service{h, h.mail, h.relay} }

// service joins the Host, its mail store and its relay link (each answers for its own methods).
type service struct {
	*Host
	*mailstore.Store
	*relaylink.Link
}

// mailHost is what the mail store needs of the host: agent registration, receipts, the sent
// records, the peers and Send (for replies).
type mailHost struct{ h *Host }

func (m mailHost) EnsureAgentTx(tx *bbolt.Tx, agent string, now time.Time, createdBy string) error {
	return ensureAgentTx(tx, agent, now, createdBy)
}

func (m mailHost) QueueReceiptTx(tx *bbolt.Tx, origin, id, agent string, c mailstore.Copy, now time.Time) error {
	return m.h.queueReceiptTx(tx, origin, id, agent, c, now)
}

func (m mailHost) ReceiptsQueued() { m.h.kickOutbox() }

func (m mailHost) SentTx(tx *bbolt.Tx, id string) bool {
	return tx.Bucket(bucketSent).Get([]byte(id)) != nil
}

func (m mailHost) PeersTx(tx *bbolt.Tx) ([]string, error) {
	ps, err := peersTx(tx)
	names := make([]string, len(ps))
	for i, p := range ps {
		names[i] = p.Host
	}
	return names, err
}

func (m mailHost) Send(ctx context.Context, req api.SendRequest) (api.SendResult, error) {
	return m.h.Send(ctx, req)
}

// buildIndexesTx fills the mail indexes from a store of schema 1: every message and copy
// (mailstore.BuildIndexesTx), sent record and accepted receipt. It runs once, in the transaction
// that opens such a store.
func buildIndexesTx(tx *bbolt.Tx) error {
	if err := mailstore.BuildIndexesTx(tx); err != nil {
		return err
	}
	sb := tx.Bucket(bucketSent)
	if err := sb.ForEach(func(k, _ []byte) error {
		var rec sentRecord
		if _, err := getJSON(sb, k, &rec); err != nil {
			return err
		}
		return mailstore.NoteSentTx(tx, rec.From, rec.ID, rec.Named)
	}); err != nil {
		return fmt.Errorf("index sent mail: %w", err)
	}
	rs := tx.Bucket(bucketRState)
	return rs.ForEach(func(k, _ []byte) error {
		var r rstateRecord
		if _, err := getJSON(rs, k, &r); err != nil {
			return err
		}
		_, recipient, _ := bytes.Cut(k, []byte{0})
		return mailstore.NoteKnownTx(tx, string(recipient), r.Host)
	})
}
