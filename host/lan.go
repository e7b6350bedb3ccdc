package host

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/host/peers"
	"github.com/agentmbx/agentmbx/host/reach"
	"github.com/agentmbx/agentmbx/internal/version"
	"github.com/agentmbx/agentmbx/lan"
	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/outbox"
)

// LANMux is the LAN server's mux (package lan); pairing registers its routes on it. The daemon
// serves it; a command that pairs without a daemon serves it for the session.
func (h *Host) LANMux() *http.ServeMux { return h.lanSrv.Mux() }

func (h *Host) newLAN() {
	h.lanSrv = lan.NewServer(lanHost{h}, lan.ServerOptions{Clock: h.clock, Logger: h.log, Version: version.String()})
	h.lanSrv.HandleRotations(h.rot.LANApplier())
	tr := lan.NewTransport(lan.TransportConfig{Identity: h, HTTPClient: h.client, Clock: h.clock, Port: h.lanPortHint})
	h.lanTransport = tr
	h.senders = map[outbox.Transport]outbox.Sender{outbox.TransportLAN: tr}
}

// outboxPeer is p as the outbox's senders see it.
func outboxPeer(p PeerRecord) outbox.Peer {
	return outbox.Peer{Host: p.Host, HostPubkey: p.HostPubkey, Addr: p.Addr, EncPub: p.EncPub}
}

// lanHost is the host as its LAN server sees it.
type lanHost struct{ *Host }

func (l lanHost) Peer(name string) (outbox.Peer, bool, error) {
	p, err := l.Host.peerRecord(name)
	if errors.Is(err, api.ErrUnpaired) {
		return outbox.Peer{}, false, nil
	}
	return outboxPeer(p), err == nil, err
}

// pinned is the peer record of p, refused (lan.ErrUnpaired) when it is no longer pinned with the
// key p's hop verified against.
func (l lanHost) pinned(p outbox.Peer) (PeerRecord, error) {
	rec, err := l.Host.peerRecord(p.Host)
	switch {
	case errors.Is(err, api.ErrUnpaired):
		return PeerRecord{}, fmt.Errorf("%w: %w", lan.ErrUnpaired, err)
	case err != nil:
		return PeerRecord{}, err
	case rec.HostPubkey != p.HostPubkey:
		return PeerRecord{}, fmt.Errorf("%w: %s was pinned again with another key", lan.ErrUnpaired, p.Host)
	}
	return rec, nil
}

func (l lanHost) ReceiveEnvelopes(p outbox.Peer, wires [][]byte, sealed bool) ([]string, error) {
	rec, err := l.pinned(p)
	if err != nil {
		return nil, err
	}
	sts, err := l.receiveBatch(rec, wires, sealed)
	if errors.Is(err, api.ErrUnpaired) {
		return nil, fmt.Errorf("%w: %w", lan.ErrUnpaired, err)
	}
	return sts, err
}

func (l lanHost) ReceiveReceipts(p outbox.Peer, items []json.RawMessage) ([]mbx.ReceiptResult, error) {
	if _, err := l.pinned(p); err != nil {
		return nil, err
	}
	res, err := l.acceptReceipts(items, p.Host)
	if err != nil {
		return nil, err
	}
	l.kickOutbox()
	return res, nil
}

// PeerReached: a verified request came from p over the LAN. Its address as pinned may still not
// answer (the request came from another one), so a peer marked down is probed now rather than
// taken for up.
func (l lanHost) PeerReached(p outbox.Peer) { l.probes.Poke(reach.LAN(p.Host)) }

// lanBound is the daemon's bound LAN address and port ("" and 0 when no daemon listens), and
// why its LAN bind failed while it retries.
func (h *Host) lanBound() (bound string, port int, bindErr string) {
	h.mu.Lock()
	b := h.bind
	h.mu.Unlock()
	if b == nil {
		return "", 0, ""
	}
	return b.State()
}

// lanPortHint is the port the daemon listens on (sent as the unsigned x-mbx-port hint), or 0.
func (h *Host) lanPortHint() int {
	_, port, _ := h.lanBound()
	return port
}

// splitListen checks a listen or dial address host:port (peers.SplitAddr).
func splitListen(s string) (string, int, error) { return peers.SplitAddr(s) }
