package lan

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

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
}

// Server is a host's LAN server: the mux the routes are on (pairing registers its own there too).
type Server struct {
	h   Host
	opt ServerOptions
	mux *http.ServeMux
}

// NewServer returns the LAN server of h.
func NewServer(h Host, opt ServerOptions) *Server {
	if opt.Clock == nil {
		opt.Clock = time.Now
	}
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	s := &Server{h: h, opt: opt, mux: http.NewServeMux()}
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

// authHop reads a hop-signed request: the named host must be a pinned peer (checked before the
// body is read), the body must fit mbx.MaxLANBody, and the hop must verify against the peer's pinned
// key within the window. On failure it has answered already (401, 413) and returns ok false.
func (s *Server) authHop(w http.ResponseWriter, r *http.Request) (outbox.Peer, []byte, bool) {
	name := r.Header.Get(mbx.HeaderHost)
	if name == "" {
		lanError(w, http.StatusUnauthorized, "missing x-mbx-host")
		return outbox.Peer{}, nil, false
	}
	peer, ok, err := s.h.Peer(name)
	if err != nil {
		s.opt.Logger.Error("LAN request: peer lookup", logkey.Err, err)
		lanError(w, http.StatusInternalServerError, "store error")
		return outbox.Peer{}, nil, false
	}
	if !ok {
		lanError(w, http.StatusUnauthorized, "host not paired")
		return outbox.Peer{}, nil, false
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, mbx.MaxLANBody))
	if err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			lanError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("body over %d bytes", mbx.MaxLANBody))
		} else {
			lanError(w, http.StatusBadRequest, "reading body failed")
		}
		return outbox.Peer{}, nil, false
	}
	if err := mbx.VerifyLANHop(peer.HostPubkey, r.Header, r.Method, r.URL.EscapedPath(), body, s.opt.Clock()); err != nil {
		s.opt.Logger.Warn("LAN request refused", logkey.Peer, name, logkey.Path, r.URL.Path, logkey.Err, err)
		lanError(w, http.StatusUnauthorized, "bad hop: "+err.Error())
		return outbox.Peer{}, nil, false
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
		res.Results[i] = mbx.EnvelopeResult{ID: envelopeID(wires[i]), Status: st}
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
	writeLAN(w, http.StatusOK, mbx.ReceiptsResponse{Results: res})
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
