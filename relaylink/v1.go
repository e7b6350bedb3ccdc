package relaylink

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/bbolt"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/checkpoint"
	"github.com/agentmbx/agentmbx/internal/logkey"
	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/outbox"
	"github.com/agentmbx/agentmbx/relayclient"
)

// A relay that speaks only v1 (docs/design.md: Compatibility; spec §11).
//
// A v2 client uses /v2 when GET /v2/relay/info answers and falls back to v1 otherwise. A v1
// relay (AgentMBX 0.5.x before 0.5.5) has no relay key, so there is nothing to pin and nothing
// it answers is signed: the owner accepts that with `relay set URL --allow-v1` (RelaySet refuses
// it otherwise, and always with --key). The link then speaks v1 to it:
//
//   - Keep enrols the host key by the same challenge (again whenever a hop is refused: a 0.5.3
//     relay forgets everything when it restarts) and publishes the v1 enc-key ad. v1 has no
//     sender allowlist. Each run also asks GET /v2/relay/info: when the relay starts answering
//     v2, the key it serves is recorded (Record.V2) for `relay status` and doctor, and the link
//     goes on speaking v1 until the owner pins that key (relay set --key), which switches it.
//   - The Pusher posts each row's sealed envelope to /v1/relay/messages. The relay's "stored" is
//     its unsigned word: an envelope row stays pending (outbox.MarkRelaySentV1: pushed again on
//     its backoff, which the relay's dedup by id absorbs) until the target's delivery receipt
//     settles it, or its deadline ends it with an alert. A delivery receipt row goes inside a
//     receipts envelope (mbx.ReceiptsDraft) sealed for the peer, since v1 carries envelopes
//     only, and ends done when stored.
//   - The receiver pulls /v1/relay/messages through SourceV1: v1 pages have no epoch (the
//     position's epoch is V1Epoch) and a cursor below the position is a rewind (a restart of the
//     relay), which pulls again from 0. Each envelope's sender is the peer its `from` host
//     names; receipts envelopes are applied by the host's receive path.

// V1Epoch is the epoch of receive positions at a v1 relay (which has none).
const V1Epoch = "v1"

// v1Pusher is what the Pusher of c needs for v1, nil when c speaks v2.
func (l *Link) v1Pusher(c *Conn) *V1Push {
	if c.V1 == nil {
		return nil
	}
	return &V1Push{Client: c.V1, Name: l.name, Key: l.key, Clock: l.clock}
}

// V1Push is what a Pusher needs to push to a v1 relay: the v1 client, and this host's name, key
// and clock to wrap delivery receipts in envelopes.
type V1Push struct {
	Client *relayclient.V1
	Name   string
	Key    mbx.SigningKey
	Clock  func() time.Time
}

// receiptsEnvelope is a sealed receipts envelope carrying wire for peer.
func (v *V1Push) receiptsEnvelope(peer outbox.Peer, wire []byte) ([]byte, error) {
	if peer.EncPub == "" || peer.Host == "" {
		return nil, errors.New("no enc key pinned for " + peer.Host + ": a receipt cannot be sealed for it through a v1 relay")
	}
	d, err := mbx.ReceiptsDraft(v.Name, peer.Host, wire)
	if err != nil {
		return nil, err
	}
	env, err := mbx.Build(d, v.Clock(), mbx.NewULIDs(rand.Reader))
	if err != nil {
		return nil, err
	}
	_, sealed, err := env.Seal(rand.Reader, peer.EncPub, v.Name, v.Key)
	return sealed, err
}

// sendV1 pushes rows to the v1 relay: envelopes as they are stored, receipts wrapped.
func (p *Pusher) sendV1(ctx context.Context, peer outbox.Peer, rows []outbox.Row) []outbox.Outcome {
	out := make([]outbox.Outcome, len(rows))
	var send []outbox.Row
	var at []int
	for i, r := range rows {
		switch {
		case r.State != outbox.StatePending:
			out[i] = outbox.Outcome{Kind: outbox.OutcomeFailed,
				Err: errors.New("another relay accepted it; a v1 relay cannot take it over: waiting for its delivery receipt")}
			continue
		case r.Kind == outbox.KindReceipt:
			w, err := p.V1.receiptsEnvelope(peer, r.Wire)
			if err != nil {
				out[i] = outbox.Outcome{Kind: outbox.OutcomeFailed, Err: fmt.Errorf("receipt through a v1 relay: %w", err)}
				continue
			}
			r.Wire = w
		}
		send, at = append(send, r), append(at, i)
	}
	if len(send) == 0 {
		return out
	}
	var res []outbox.Outcome
	if p.Pacer != nil {
		res = p.Pacer.send(ctx, p, send)
	} else {
		res = p.batches(ctx, send)
	}
	for j, o := range res {
		out[at[j]] = o
	}
	return out
}

// pushV1 sends one batch of sealed envelopes to the v1 relay. The rows it stored are
// OutcomeRelaySentV1; the one it refused failed with its reason; the rest were not sent.
func (p *Pusher) pushV1(ctx context.Context, rows []outbox.Row) []outbox.Outcome {
	envs := make([]json.RawMessage, len(rows))
	for i, r := range rows {
		envs[i] = r.Wire
	}
	res, err := p.V1.Client.Push(ctx, envs)
	var se *relayclient.StatusError
	if err != nil && errors.As(err, &se) && se.Status == 413 && se.Message != "" {
		err, res = nil, relayclient.V1PushResult{Error: se.Message} // refused the first: nothing stored
	}
	if p.Observe != nil {
		p.Observe(err)
	}
	if err != nil {
		return outbox.FailedAll(len(rows), fmt.Errorf("v1 relay push: %w", err), false)
	}
	out := make([]outbox.Outcome, len(rows))
	for i := range rows {
		switch {
		case i < res.Stored:
			out[i] = outbox.Outcome{Kind: outbox.OutcomeRelaySentV1, Relay: p.Pin.URL}
		case i == res.Stored && res.Error != "":
			out[i] = outbox.Outcome{Kind: outbox.OutcomeFailed, Err: errors.New("the v1 relay refused it: " + res.Error)}
		default:
			out[i] = outbox.Outcome{Kind: outbox.OutcomeFailed, Err: fmt.Errorf("%w (the v1 relay stopped at an earlier envelope)", ErrNotSent)}
		}
	}
	return out
}

// keepV1 is Keep for a relay pinned as v1: note whether it answers v2 now, enrol when the cache
// says nothing (or force), and publish the v1 enc-key ad when due.
func (l *Link) keepV1(ctx context.Context, c *Conn, force bool) error {
	l.watchV2(ctx, c)
	s, err := l.load()
	if err != nil || s == nil || s.URL != c.Pin.URL || !s.V1 {
		return err
	}
	p := s.Published
	now := l.clock()
	hostKey := l.key.PublicKey()
	enrol := force || p.Enrolled == nil || p.Enrolled.URL != c.Pin.URL || p.Enrolled.HostKey != hostKey
	if enrol {
		if err := c.V1.Enrol(ctx, ""); err != nil {
			return l.recordOutcome(c, OpEnrol, err)
		}
		l.problem(c, OpEnrol, nil)
		l.problem(c, OpPull, nil)
		l.enrolled.Add(1)
		p.Enrolled = &Enrolment{URL: c.Pin.URL, HostKey: hostKey, At: mbx.ISOTime(now)}
		p.EncAd = nil
		l.log.Info("enrolled at the v1 relay", logkey.Relay, c.Pin.URL)
	}
	due := p.EncAd == nil || p.EncAd.EncPub != l.enc
	if !due {
		at, err := mbx.ParseISOTime(p.EncAd.At)
		due = err != nil || !now.Before(at.Add(mbx.EncAdRefresh))
	}
	var errs []error
	if due {
		if err := c.V1.PublishEncAd(ctx, l.enc); err != nil {
			errs = append(errs, l.recordOutcome(c, OpEncAd, err))
		} else {
			l.problem(c, OpEncAd, nil)
			p.EncAd = &EncAd{EncPub: l.enc, At: mbx.ISOTime(now)}
		}
	}
	if enrol || due {
		if err := l.saveKeep(c, p); err != nil {
			return err
		}
	}
	if enrol {
		l.host.KickOutbox()
		l.kickReceiver()
	}
	return errors.Join(errs...)
}

// forgetV1Enrolment drops the enrolment cache of the v1 relay of c, which refused this host's
// hop (a 0.5.3 relay forgets every enrolment when it restarts): the next Keep enrols again and
// republishes the enc-key ad.
func (l *Link) forgetV1Enrolment(c *Conn) {
	if _, err := l.update(c.Pin, func(_ *bbolt.Tx, s *Record) error {
		s.Enrolled, s.EncAd = nil, nil
		return nil
	}); err != nil {
		l.log.Error("forgetting the v1 enrolment", logkey.Relay, c.Pin.URL, logkey.Err, err)
	}
}

// watchV2 asks a relay pinned as v1 for its v2 info, and records the key it serves when it
// answers (or clears the record when it answers 404 again). Any other failure is the info
// problem.
func (l *Link) watchV2(ctx context.Context, c *Conn) {
	info, err := relayclient.Discover(ctx, c.Pin.URL, l.clientOptions(l.caOf(c)))
	switch {
	case errors.Is(err, relayclient.ErrV1Only):
		l.problem(c, OpInfo, nil)
		info = mbx.InfoResponse{}
	case err != nil:
		l.problem(c, OpInfo, err)
		return
	default:
		l.problem(c, OpInfo, nil)
	}
	now := mbx.ISOTime(l.clock())
	noted := false
	_, uerr := l.update(c.Pin, func(_ *bbolt.Tx, s *Record) error {
		noted = false
		switch {
		case info.RelayPubkey == "":
			s.V2 = nil
		case s.V2 == nil || s.V2.RelayPubkey != info.RelayPubkey:
			s.V2 = &api.RelayV2Seen{RelayPubkey: info.RelayPubkey, Fingerprint: mbx.Fingerprint(info.RelayPubkey), At: now}
			noted = true
		}
		return nil
	})
	if uerr != nil {
		l.log.Error("recording what the v1 relay answers", logkey.Relay, c.Pin.URL, logkey.Err, uerr)
		return
	}
	if noted {
		l.log.Warn("the relay pinned as v1 answers v2 now: pin its key to use it authenticated (agentmbx relay set URL --key FINGERPRINT)",
			logkey.Relay, c.Pin.URL, logkey.Fingerprint, mbx.Fingerprint(info.RelayPubkey))
	}
}

// caOf is the CA bundle pinned with c's relay ("" for none).
func (l *Link) caOf(c *Conn) string {
	if s, err := l.load(); err == nil && s != nil && s.URL == c.Pin.URL {
		return s.CA
	}
	return ""
}

// SourceV1 is a v1 relay client as the Relay an checkpoint.Receiver pulls from: v1 pages become
// pages of epoch V1Epoch whose items are envelopes, each named by its sender's host key (the
// pinned peer its `from` host names; "" when none is pinned under that name).
type SourceV1 struct {
	Client *relayclient.V1
	// SenderKey returns the host key of the pinned peer named host ("" for none).
	SenderKey func(host string) string
	// ObservePull and ObserveAck are told each pull's and ack's error (nil on success).
	ObservePull func(ctx context.Context, err error)
	ObserveAck  func(err error)
}

var _ checkpoint.Relay = SourceV1{}

// Pull asks the v1 relay for the envelopes after r.After (v1 has no page size, no epoch and no
// long poll).
func (s SourceV1) Pull(ctx context.Context, r checkpoint.PullRequest) (mbx.PullResponse, error) {
	page, err := s.Client.Pull(ctx, r.After)
	if s.ObservePull != nil {
		s.ObservePull(ctx, err)
	}
	if err != nil {
		return mbx.PullResponse{}, ReceiverError(err)
	}
	out := mbx.PullResponse{Epoch: V1Epoch, HeadSeq: page.Cursor, LastSeq: page.Cursor, Items: make([]mbx.PullItem, 0, len(page.Items))}
	if page.Rewound {
		return out, nil // head 0 below the position: the receiver resets and pulls from 0
	}
	for _, it := range page.Items {
		var e struct {
			ID   string `json:"id"`
			From string `json:"from"`
		}
		_ = json.Unmarshal(it.Envelope, &e)
		host := ""
		if _, h, ok := cutLast(e.From, '@'); ok {
			host = h
		}
		sender := ""
		if host != "" && s.SenderKey != nil {
			sender = s.SenderKey(host)
		}
		out.Items = append(out.Items, mbx.PullItem{Seq: it.Seq, Kind: mbx.ItemKindEnvelope, ItemID: e.ID,
			SenderPubkey: sender, WireB64: base64.StdEncoding.EncodeToString(it.Envelope)})
	}
	out.More = len(out.Items) > 0
	return out, nil
}

// Ack tells the v1 relay everything through through is processed.
func (s SourceV1) Ack(ctx context.Context, _ string, through int64) (mbx.AckResponse, error) {
	err := s.Client.Ack(ctx, through)
	if s.ObserveAck != nil {
		s.ObserveAck(err)
	}
	if err != nil {
		return mbx.AckResponse{}, ReceiverError(err)
	}
	return mbx.AckResponse{AckedThrough: through}, nil
}

// cutLast splits s around the last sep.
func cutLast(s string, sep byte) (before, after string, found bool) {
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == sep {
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}

// sourceV1 is the v1 relay client of c as the receiver sees it.
func (l *Link) sourceV1(c *Conn) SourceV1 {
	return SourceV1{Client: c.V1,
		SenderKey: func(host string) string {
			key := ""
			_ = l.db.View(func(tx *bbolt.Tx) error {
				peers, err := l.host.Peers(tx)
				for _, p := range peers {
					if p.Host == host {
						key = p.Key
					}
				}
				return err
			})
			return key
		},
		ObservePull: func(ctx context.Context, err error) {
			l.host.Reached(ctx, err)
			switch {
			case err == nil:
				l.problem(c, OpPull, nil)
			case ctx.Err() != nil:
			default:
				_ = l.failed(c, OpPull, err) // recorded; nothing waits on this error
			}
		},
	}
}
