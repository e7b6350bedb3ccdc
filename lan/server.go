package lan

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"golang.org/x/time/rate"

	"github.com/agentmbx/agentmbx/internal/bodylimit"
	"github.com/agentmbx/agentmbx/internal/logkey"
	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/outbox"
)

// Host is what the LAN server needs of its host.
type Host interface {
	Name() string
	Key() mbx.SigningKey
	EncKey() mbx.EncKey
	// Peer is the pinned peer named name; ok is false when no such peer is pinned.
	Peer(name string) (p outbox.Peer, ok bool, err error)
	// ReceiveEnvelopes stores the envelopes peer sent (sealed: over the v2 route, which takes
	// sealed envelopes only) and returns one status each. An error wrapping ErrUnpaired says the
	// peer is not pinned (any more) with the key its hop verified against.
	ReceiveEnvelopes(peer outbox.Peer, wires [][]byte, sealed bool) ([]string, error)
	// ReceiveReceipts applies the signed receipts peer sent and returns one result each.
	ReceiveReceipts(peer outbox.Peer, items []json.RawMessage) ([]mbx.ReceiptResult, error)
	// PeerReached is told that peer reached this host with a verified hop.
	PeerReached(peer outbox.Peer)
}

// ErrUnpaired is what a Host's Receive* wrap when the sending host is not a pinned peer.
var ErrUnpaired = errors.New("host not paired")

// ServerOptions configure NewServer.
type ServerOptions struct {
	Clock   func() time.Time // default time.Now
	Logger  *slog.Logger     // default slog.Default()
	Version string           // reported on GET /v2/status
	// MaxConns caps the connections served at once (Limit). Default DefaultMaxConns.
	MaxConns int
	// MaxConnsPerAddr caps the connections of one client address (Limit). Default
	// DefaultMaxConnsPerAddr.
	MaxConnsPerAddr int
	// BodyBudget caps the body bytes in flight across requests (Handler), counted as they
	// arrive; past it requests get 503 and the rest of their body is not read. Default
	// DefaultBodyBudget.
	BodyBudget int64
	// RotationsPerSecond and RotationBurst bound POST /v1/rotate per client address, which has
	// no hop to check first: past them it answers 429 before reading the body. Defaults
	// DefaultRotationsPerSecond and DefaultRotationBurst. RotationAddrs is how many addresses
	// have a bucket of their own (default DefaultRotationAddrs); the others share one.
	RotationsPerSecond float64
	RotationBurst      int
	RotationAddrs      int
}

// Server is a host's LAN server: the mux the routes are on (pairing registers its own there too).
type Server struct {
	h       Host
	opt     ServerOptions
	mux     *http.ServeMux
	budget  *bodylimit.Budget
	refused *refusals
	rotate  *addrLimiter // POST /v1/rotate, per client address
}

// NewServer returns the LAN server of h.
func NewServer(h Host, opt ServerOptions) *Server {
	if opt.Clock == nil {
		opt.Clock = time.Now
	}
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	if opt.MaxConns <= 0 {
		opt.MaxConns = DefaultMaxConns
	}
	if opt.MaxConnsPerAddr <= 0 {
		opt.MaxConnsPerAddr = DefaultMaxConnsPerAddr
	}
	if opt.BodyBudget <= 0 {
		opt.BodyBudget = DefaultBodyBudget
	}
	if opt.RotationsPerSecond <= 0 {
		opt.RotationsPerSecond = DefaultRotationsPerSecond
	}
	if opt.RotationBurst <= 0 {
		opt.RotationBurst = DefaultRotationBurst
	}
	if opt.RotationAddrs <= 0 {
		opt.RotationAddrs = DefaultRotationAddrs
	}
	s := &Server{h: h, opt: opt, mux: http.NewServeMux(), budget: bodylimit.NewBudget(opt.BodyBudget),
		refused: &refusals{log: opt.Logger, clock: opt.Clock},
		rotate:  newAddrLimiter(rate.Limit(opt.RotationsPerSecond), opt.RotationBurst, opt.RotationAddrs)}
	s.mux.HandleFunc("POST "+mbx.PathLANEnvelopes, s.handleEnvelopes)
	s.mux.HandleFunc("POST "+mbx.PathLANEnvelopesV1, s.handleEnvelopes)
	s.mux.HandleFunc("POST "+mbx.PathLANReceipts, s.handleReceipts)
	s.mux.HandleFunc("GET "+mbx.PathLANEncKey, s.handleEncKey)
	s.mux.HandleFunc("GET "+mbx.PathLANStatus, s.handleStatus)
	return s
}

// Mux is the server's mux: serve it, and register further routes on it.
func (s *Server) Mux() *http.ServeMux { return s.mux }

func writeLAN(w http.ResponseWriter, status int, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		status = http.StatusInternalServerError
		buf.Reset()
		buf.WriteString(`{"error":"encode answer failed"}` + "\n")
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(buf.Bytes())
}

func lanError(w http.ResponseWriter, status int, msg string) {
	writeLAN(w, status, map[string]string{"error": msg})
}

// authHop reads a hop-signed request. Before any body byte is read, the x-mbx headers must be
// there, the timestamp within the window and the named host a pinned peer; the body must then fit
// mbx.MaxLANBody and the budget, and the hop verify against the peer's pinned key. On failure it
// has answered already (401, 413, 503) and returns ok false; refusals before the body close the
// connection, so net/http does not read what was refused.
func (s *Server) authHop(w http.ResponseWriter, r *http.Request) (outbox.Peer, []byte, bool) {
	name := r.Header.Get(mbx.HeaderHost)
	refuse := func(status int, msg string) (outbox.Peer, []byte, bool) {
		s.refused.note(name, r.URL.Path, msg)
		if !ticketOf(r).Read() {
			w.Header().Set("Connection", "close")
		}
		lanError(w, status, msg)
		return outbox.Peer{}, nil, false
	}
	if name == "" || r.Header.Get(mbx.HeaderTS) == "" || r.Header.Get(mbx.HeaderSig) == "" {
		return refuse(http.StatusUnauthorized, "missing x-mbx headers")
	}
	if err := mbx.CheckLANHopTime(r.Header, s.opt.Clock()); err != nil {
		return refuse(http.StatusUnauthorized, "bad hop: "+err.Error())
	}
	peer, ok, err := s.h.Peer(name)
	if err != nil {
		s.opt.Logger.Error("LAN request: peer lookup", logkey.Err, err)
		w.Header().Set("Connection", "close")
		lanError(w, http.StatusInternalServerError, "store error")
		return outbox.Peer{}, nil, false
	}
	if !ok {
		return refuse(http.StatusUnauthorized, "host not paired")
	}
	body, err := bodylimit.Read(w, r, mbx.MaxLANBody, ticketOf(r), nil)
	switch {
	case errors.Is(err, bodylimit.ErrTooLarge):
		return refuse(http.StatusRequestEntityTooLarge, fmt.Sprintf("body over %d bytes", mbx.MaxLANBody))
	case errors.Is(err, bodylimit.ErrBusy):
		w.Header().Set("Retry-After", "5")
		return refuse(http.StatusServiceUnavailable, "busy, retry later")
	case err != nil:
		return refuse(http.StatusBadRequest, "reading body failed")
	}
	if err := mbx.VerifyLANHop(peer.HostPubkey, r.Header, r.Method, r.URL.EscapedPath(), body, s.opt.Clock()); err != nil {
		return refuse(http.StatusUnauthorized, "bad hop: "+err.Error())
	}
	s.h.PeerReached(peer) // it reached us over the LAN: try the LAN for new rows again
	return peer, body, true
}

func (s *Server) handleEnvelopes(w http.ResponseWriter, r *http.Request) {
	peer, body, ok := s.authHop(w, r)
	if !ok {
		return
	}
	var req mbx.EnvelopesRequest
	if err := json.Unmarshal(body, &req); err != nil || req.Envelopes == nil {
		lanError(w, http.StatusBadRequest, `body must be {"envelopes":[…]}`)
		return
	}
	if len(req.Envelopes) > mbx.MaxLANEnvelopes {
		lanError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("more than %d envelopes", mbx.MaxLANEnvelopes))
		return
	}
	wires := make([][]byte, len(req.Envelopes))
	for i, e := range req.Envelopes {
		wires[i] = e
	}
	sts, err := s.h.ReceiveEnvelopes(peer, wires, r.URL.Path == mbx.PathLANEnvelopes)
	if err != nil {
		if errors.Is(err, ErrUnpaired) {
			lanError(w, http.StatusUnauthorized, "host not paired")
			return
		}
		s.opt.Logger.Error("storing received envelopes", logkey.Peer, peer.Host, logkey.Err, err)
		lanError(w, http.StatusInternalServerError, "store error")
		return
	}
	res := mbx.EnvelopesResponse{Results: make([]mbx.EnvelopeResult, len(sts))}
	for i, st := range sts {
		e := mbx.EnvelopeResult{ID: envelopeID(wires[i]), Status: st}
		if stored(st, false) {
			e.Accept, e.Sig = s.signAccept(peer, e.ID, wires[i])
		}
		res.Results[i] = e
	}
	writeLAN(w, http.StatusOK, res)
}

// envelopeID reads the id of envelope bytes leniently, for answers ("" when there is none).
func envelopeID(wire []byte) string {
	var x struct {
		ID any `json:"id"`
	}
	if json.Unmarshal(wire, &x) != nil {
		return ""
	}
	s, _ := x.ID.(string)
	if len(s) > 100 {
		s = s[:100]
	}
	return s
}

func (s *Server) handleReceipts(w http.ResponseWriter, r *http.Request) {
	peer, body, ok := s.authHop(w, r)
	if !ok {
		return
	}
	var req mbx.ReceiptsRequest
	if err := json.Unmarshal(body, &req); err != nil || req.Receipts == nil {
		lanError(w, http.StatusBadRequest, `body must be {"receipts":[…]}`)
		return
	}
	if len(req.Receipts) > mbx.ReceiptBatchMax {
		lanError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("more than %d receipts", mbx.ReceiptBatchMax))
		return
	}
	res, err := s.h.ReceiveReceipts(peer, req.Receipts)
	if err != nil {
		if errors.Is(err, ErrUnpaired) {
			lanError(w, http.StatusUnauthorized, "host not paired")
			return
		}
		s.opt.Logger.Error("storing received receipts", logkey.Peer, peer.Host, logkey.Err, err)
		lanError(w, http.StatusInternalServerError, "store error")
		return
	}
	if len(res) == len(req.Receipts) {
		for i := range res {
			if stored(res[i].Status, true) {
				res[i].Accept, res[i].Sig = s.signAccept(peer, res[i].Item, req.Receipts[i])
			}
		}
	}
	writeLAN(w, http.StatusOK, mbx.ReceiptsResponse{Results: res})
}

// stored reports whether an item's status says this host has it (accepted, or a duplicate; for
// receipts also stale: a later state is stored): its answer carries a LAN accept statement.
func stored(status string, receipt bool) bool {
	return status == mbx.StatusAccepted || status == mbx.StatusDuplicate || (receipt && status == "stale")
}

// signAccept is this host's signed LAN accept statement for the item itemID that peer delivered
// as wire (nil and "" when the statement cannot be encoded: the sender then keeps its row
// pending and sends it again).
func (s *Server) signAccept(peer outbox.Peer, itemID string, wire []byte) (json.RawMessage, string) {
	key := s.h.Key()
	stmt, sig, err := mbx.SignLANAccept(key, mbx.NewLANAccept(key.PublicKey(), peer.HostPubkey, itemID, wire))
	if err != nil {
		s.opt.Logger.Error("signing a LAN accept statement", logkey.Peer, peer.Host, logkey.Err, err)
		return nil, ""
	}
	return stmt, sig
}

func (s *Server) handleEncKey(w http.ResponseWriter, _ *http.Request) {
	ad, sig, err := mbx.SignEncAdV2(s.h.Name(), s.h.Key(), s.h.EncKey().PublicKey(), s.opt.Clock(), 0)
	if err == nil {
		var pub mbx.EncAdPublish
		if pub, err = ad.Publish(sig); err == nil {
			writeLAN(w, http.StatusOK, pub)
			return
		}
	}
	s.opt.Logger.Error("signing enc-key ad", logkey.Err, err)
	lanError(w, http.StatusInternalServerError, "signing failed")
}

func (s *Server) handleStatus(w http.ResponseWriter, _ *http.Request) {
	writeLAN(w, http.StatusOK, mbx.LANStatus{Host: s.h.Name(), HostPubkey: s.h.Key().PublicKey(), Version: s.opt.Version})
}
