package host

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode"

	"go.etcd.io/bbolt"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/host/mailstore"
	"github.com/agentmbx/agentmbx/internal/logkey"
	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/outbox"
)

// sentRecord is a sent bucket value: a message this host sent and where it went, for `sent` and
// for the acceptReceipt rule "a message this host sent and routed to that host".
type sentRecord struct {
	ID      string   `json:"id"`
	From    string   `json:"from"` // the local agent
	Subject string   `json:"subject"`
	TS      string   `json:"ts"`
	To      []string `json:"to"`
	Local   []string `json:"local,omitempty"` // local recipients
	Hosts   []string `json:"hosts,omitempty"` // remote hosts, one outbox row each
	// Named lists, per host, the agents addressed there by name@host.
	Named map[string][]string `json:"named,omitempty"`
}

// route is where a message goes.
type route struct {
	local []string            // local agents, sorted
	hosts []string            // peer hosts, sorted
	named map[string][]string // host → agents addressed as name@host
}

// routeAddresses expands the addresses of a message from agent from (read with mbx.ParseAddress):
// name@thishost and owner are local; name@peer goes to that peer; a bare name goes to the local
// agent of that name and to every peer; role:<role> to the local agents with the role (not the
// sender) and every peer; * to every local agent but the sender and every peer. An address of a
// host that is not a peer is an error. (mbx.ExpandRecipients differs on purpose: it sends a bare
// name to at most one peer known to have it, which this host cannot know, and includes the
// sender in * and roles.)
func (h *Host) routeAddresses(from string, to []string, peers []PeerRecord, agents []agentRecord) (route, error) {
	r := route{named: map[string][]string{}}
	addLocal := func(n string) {
		if !slices.Contains(r.local, n) {
			r.local = append(r.local, n)
		}
	}
	addHost := func(p string) {
		if !slices.Contains(r.hosts, p) {
			r.hosts = append(r.hosts, p)
		}
	}
	allPeers := func() {
		for _, p := range peers {
			addHost(p.Host)
		}
	}
	for _, raw := range to {
		a, err := mbx.ParseAddress(raw)
		if err != nil {
			return route{}, fmt.Errorf("%w: %w", api.ErrInvalid, err)
		}
		switch a.Kind {
		case mbx.AddrAgent:
			if a.Name == AgentMBX {
				return route{}, fmt.Errorf("%w: %q cannot receive mail", api.ErrReserved, raw)
			}
			if a.Host == h.name {
				addLocal(a.Name)
				continue
			}
			if !slices.ContainsFunc(peers, func(p PeerRecord) bool { return p.Host == a.Host }) {
				return route{}, fmt.Errorf("%w: %q in %q", api.ErrUnknownHost, a.Host, raw)
			}
			addHost(a.Host)
			if !slices.Contains(r.named[a.Host], a.Name) {
				r.named[a.Host] = append(r.named[a.Host], a.Name)
			}
		case mbx.AddrName:
			if slices.ContainsFunc(agents, func(ag agentRecord) bool { return ag.Name == a.Name }) {
				addLocal(a.Name)
			}
			allPeers()
		case mbx.AddrRole:
			for _, ag := range agents {
				if ag.Role == a.Role && ag.Name != from {
					addLocal(ag.Name)
				}
			}
			allPeers()
		case mbx.AddrBroadcast:
			for _, ag := range agents {
				if ag.Name != from {
					addLocal(ag.Name)
				}
			}
			allPeers()
		case mbx.AddrOwner:
			addLocal(AgentOwner)
		}
	}
	slices.Sort(r.local)
	slices.Sort(r.hosts)
	return r, nil
}

// defaultSubject is the subject of a message sent without one: the first non-blank line of the
// body, cut to 80 characters, or "(no subject)". (Envelopes require a subject.)
func defaultSubject(body string) string {
	for _, line := range strings.Split(body, "\n") {
		line = strings.TrimFunc(line, unicode.IsSpace)
		if line != "" {
			if r := []rune(line); len(r) > 80 {
				line = string(r[:79]) + "…"
			}
			return line
		}
	}
	return "(no subject)"
}

// Send accepts a message from a local agent (registered on first use) and returns once it is
// durable: the local copies, the sender's copy, the sent record and one outbox row per target
// host with its sealed wire bytes, all in one transaction (shared with concurrent senders through
// bbolt's Batch, so each fsync serves many). Nothing is stored when an address is bad or names a
// host that is not paired. A send that met a peer's key rotation between sealing and storing
// (nothing stored) is sealed again, a few times at most.
func (h *Host) Send(ctx context.Context, req api.SendRequest) (api.SendResult, error) {
	for try := 1; ; try++ {
		res, err := h.sendOnce(ctx, req)
		if !errors.Is(err, errRetrySend) || try == sendTries {
			return res, err
		}
	}
}

// sendTries bounds the seals of one Send when peers' keys keep changing under it.
const sendTries = 3

func (h *Host) sendOnce(ctx context.Context, req api.SendRequest) (api.SendResult, error) {
	if err := ctx.Err(); err != nil {
		return api.SendResult{}, err
	}
	if err := checkAgentName(req.From); err != nil {
		return api.SendResult{}, fmt.Errorf("host: send: from: %w", err)
	}
	if len(req.To) == 0 {
		return api.SendResult{}, fmt.Errorf("host: send: %w: no address given", api.ErrNoRecipients)
	}
	if len(req.To) > mbx.MaxRecipients {
		return api.SendResult{}, fmt.Errorf("host: send: %w: more than %d addresses", api.ErrInvalid, mbx.MaxRecipients)
	}
	kind := mbx.Kind(req.Kind)
	if kind == "" {
		kind = mbx.KindMessage
	}
	if !kind.Valid() {
		return api.SendResult{}, fmt.Errorf("host: send: %w: kind %q (one of message, request, reply, status, decision, alert, task)", api.ErrInvalid, req.Kind)
	}
	subject := req.Subject
	if strings.TrimSpace(subject) == "" {
		subject = defaultSubject(req.Body)
	}
	var peers []PeerRecord
	var agents []agentRecord
	if err := h.db.View(func(tx *bbolt.Tx) error {
		var err error
		if peers, err = peersTx(tx); err != nil {
			return err
		}
		if agents, err = agentsTx(tx); err != nil {
			return err
		}
		if req.Thread == "" && req.ReplyTo != "" {
			req.Thread, err = mailstore.ReplyThreadTx(tx, req.ReplyTo)
		}
		return err
	}); err != nil {
		return api.SendResult{}, fmt.Errorf("host: send: %w", err)
	}
	rt, err := h.routeAddresses(req.From, req.To, peers, agents)
	if err != nil {
		return api.SendResult{}, fmt.Errorf("host: send: %w", err)
	}
	if len(rt.local) == 0 && len(rt.hosts) == 0 {
		return api.SendResult{}, fmt.Errorf("host: send: %w: %s matches no local agent and there are no peers", api.ErrNoRecipients, strings.Join(req.To, ", "))
	}
	now := h.clock()
	env, err := mbx.Build(mbx.Draft{
		From: req.From + "@" + h.name, To: req.To, Subject: subject, Body: req.Body, Kind: kind,
		Thread: req.Thread, ReplyTo: req.ReplyTo, NeedsReply: req.NeedsReply, Refs: req.Refs,
	}, now, h.ulids)
	if err != nil {
		return api.SendResult{}, fmt.Errorf("host: send: %w: %w", api.ErrInvalid, err)
	}
	type target struct {
		peer PeerRecord
		wire []byte
	}
	targets := make([]target, 0, len(rt.hosts))
	for _, hn := range rt.hosts {
		i := slices.IndexFunc(peers, func(p PeerRecord) bool { return p.Host == hn })
		_, wire, err := env.Seal(h.rand, peers[i].EncPub, h.name, h.key)
		if err != nil {
			return api.SendResult{}, fmt.Errorf("host: send: seal for %s: %w", hn, err)
		}
		targets = append(targets, target{peers[i], wire})
	}
	replyTo := ""
	if env.ReplyTo != nil {
		replyTo = *env.ReplyTo
	}
	msg := mailstore.Message{
		ID: env.ID, TS: env.TS, From: env.From, To: env.To, Subject: env.Subject, Body: env.Body,
		Kind: string(env.Kind), Thread: env.Thread, ReplyTo: replyTo, Refs: env.Refs, NeedsReply: env.NeedsReply,
		Via: api.ViaLocal, Key: h.key.Fingerprint(),
	}
	rec := sentRecord{ID: env.ID, From: req.From, Subject: env.Subject, TS: env.TS, To: env.To,
		Local: rt.local, Hosts: rt.hosts, Named: rt.named}
	if len(rec.Named) == 0 {
		rec.Named = nil
	}
	err = h.db.Batch(func(tx *bbolt.Tx) error {
		for _, t := range targets {
			p, err := peerTx(tx, t.peer.Host)
			if err != nil {
				return fmt.Errorf("%w: %s was unpinned meanwhile", api.ErrUnknownHost, t.peer.Host)
			}
			if p.HostPubkey != t.peer.HostPubkey || p.EncPub != t.peer.EncPub {
				return fmt.Errorf("peer %s changed keys meanwhile: %w", p.Host, errRetrySend)
			}
		}
		if err := ensureAgentTx(tx, req.From, now, ""); err != nil {
			return err
		}
		if err := h.mail.DeliverTx(tx, &msg, rt.local, now); err != nil {
			return err
		}
		if err := putJSON(tx.Bucket(bucketSent), []byte(rec.ID), rec); err != nil {
			return err
		}
		if err := mailstore.NoteSentTx(tx, req.From, rec.ID, rt.named); err != nil {
			return err
		}
		ob := h.ob.In(tx)
		for _, t := range targets {
			if _, err := ob.Add(outbox.NewRow{
				Kind: outbox.KindEnvelope, ItemID: env.ID, Host: t.peer.Host, HostKey: t.peer.HostPubkey,
				Wire: t.wire, Agent: req.From, Subject: env.Subject, Transport: outbox.TransportLAN,
			}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return api.SendResult{}, fmt.Errorf("host: send: %w", err)
	}
	if len(targets) > 0 {
		h.kickOutbox()
	}
	res := api.SendResult{ID: env.ID, Hosts: rt.hosts}
	for _, a := range rt.local {
		res.Local = append(res.Local, a+"@"+h.name)
	}
	h.log.Debug("message sent", logkey.Msg, env.ID, logkey.From, req.From, logkey.Local, len(rt.local), logkey.Hosts, len(rt.hosts))
	return res, nil
}

// errRetrySend says a peer's keys changed between sealing and committing; the send is refused
// (nothing stored) and may simply be repeated.
var errRetrySend = api.NewError(api.CodeConflict, "peer keys changed while sending", "send again")
