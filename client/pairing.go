package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/agentmbx/agentmbx/api"
)

// LAN pairing over the control socket.
//
// While a daemon runs it holds the store, so `agentmbx pair` and `agentmbx join` ask it to run
// the pairing session (its LAN server answers the other host):
//
//	POST /v1/pair/start    {"ttl":"10m0s"}            → {"token"}
//	GET  /v1/pair                                     → the session state (the service's JSON)
//	POST /v1/pair/join     {"addr","token"}           → the session state, with the code
//	POST /v1/pair/confirm  {"accept":bool}            → api.Peer (waits for the other side)
//	POST /v1/pair/cancel                              → {}
//
// The session state is whatever JSON the service's state type marshals to (host.PairingState:
// state, role, code, peer, expires_at, error, reason); the client hands it over undecoded.

// Pairer is what a service offers for LAN pairing; *host.Host implements it with S =
// host.PairingState. NewHandler serves the pairing routes for it when given WithPairing.
type Pairer[S any] interface {
	// StartPairing opens a session as the inviter and returns its one-time token.
	StartPairing(ttl time.Duration) (string, error)
	// PairingStatus is the state of the current or last session.
	PairingStatus() (S, error)
	// JoinPairing joins the inviter at addr with token and returns the state with the code.
	JoinPairing(ctx context.Context, addr, token string) (S, error)
	// ConfirmPairing gives this side's answer to the code and waits for the other side's.
	ConfirmPairing(ctx context.Context, accept bool) (api.Peer, error)
	// CancelPairing ends the open session without pinning.
	CancelPairing(ctx context.Context) error
}

// HandlerOption configures NewHandler.
type HandlerOption func(*handler)

// WithPairing makes the handler serve the pairing routes by calling p.
func WithPairing[S any](p Pairer[S]) HandlerOption {
	return func(h *handler) {
		h.pair = &pairFuncs{
			start:  p.StartPairing,
			status: func() (any, error) { return p.PairingStatus() },
			join: func(ctx context.Context, addr, token string) (any, error) {
				return p.JoinPairing(ctx, addr, token)
			},
			confirm: p.ConfirmPairing,
			cancel:  p.CancelPairing,
		}
	}
}

// pairFuncs is a Pairer with its state type erased.
type pairFuncs struct {
	start   func(ttl time.Duration) (string, error)
	status  func() (any, error)
	join    func(ctx context.Context, addr, token string) (any, error)
	confirm func(ctx context.Context, accept bool) (api.Peer, error)
	cancel  func(ctx context.Context) error
}

// Request and answer bodies of the pairing routes.
type (
	pairStartRequest struct {
		TTL string `json:"ttl,omitempty"`
	}
	pairStartAnswer struct {
		Token string `json:"token"`
	}
	pairJoinRequest struct {
		Addr  string `json:"addr"`
		Token string `json:"token"`
	}
	pairConfirmRequest struct {
		Accept *bool `json:"accept"`
	}
)

// errNoPairing answers the pairing routes of a handler made without WithPairing.
var errNoPairing = &Error{Message: "this daemon does not pair over its control socket", Code: CodeNotFound,
	HintMsg: "stop the daemon, pair (the pair command serves the LAN itself), then start the daemon again"}

func (h *handler) pairStart(w http.ResponseWriter, r *http.Request) (any, error) {
	if h.pair == nil {
		return nil, errNoPairing
	}
	var req pairStartRequest
	if err := decode(w, r, MaxRequestBody, &req); err != nil {
		return nil, err
	}
	var ttl time.Duration
	if req.TTL != "" {
		d, err := time.ParseDuration(req.TTL)
		if err != nil || d < 0 {
			return nil, &Error{Message: fmt.Sprintf("bad pairing ttl %q", req.TTL), Code: CodeBadRequest, HintMsg: "a duration like 10m"}
		}
		ttl = d
	}
	tok, err := h.pair.start(ttl)
	if err != nil {
		return nil, err
	}
	return pairStartAnswer{Token: tok}, nil
}

func (h *handler) pairStatus(_ http.ResponseWriter, _ *http.Request) (any, error) {
	if h.pair == nil {
		return nil, errNoPairing
	}
	return h.pair.status()
}

func (h *handler) pairJoin(w http.ResponseWriter, r *http.Request) (any, error) {
	if h.pair == nil {
		return nil, errNoPairing
	}
	var req pairJoinRequest
	if err := decode(w, r, MaxRequestBody, &req); err != nil {
		return nil, err
	}
	return h.pair.join(r.Context(), req.Addr, req.Token)
}

func (h *handler) pairConfirm(w http.ResponseWriter, r *http.Request) (any, error) {
	if h.pair == nil {
		return nil, errNoPairing
	}
	var req pairConfirmRequest
	if err := decode(w, r, MaxRequestBody, &req); err != nil {
		return nil, err
	}
	if req.Accept == nil {
		return nil, &Error{Message: `pairing confirmation without "accept"`, Code: CodeBadRequest}
	}
	return h.pair.confirm(r.Context(), *req.Accept)
}

func (h *handler) pairCancel(_ http.ResponseWriter, r *http.Request) (any, error) {
	if h.pair == nil {
		return nil, errNoPairing
	}
	if err := h.pair.cancel(r.Context()); err != nil {
		return nil, err
	}
	return struct{}{}, nil
}

// StartPairing asks the daemon to open a pairing session as the inviter (ttl 0: the daemon's
// default) and returns the one-time token to pass to the other host.
func (c *Client) StartPairing(ctx context.Context, ttl time.Duration) (string, error) {
	req := pairStartRequest{}
	if ttl > 0 {
		req.TTL = ttl.String()
	}
	var res pairStartAnswer
	err := c.do(ctx, http.MethodPost, "/v1/pair/start", nil, req, &res)
	return res.Token, err
}

// PairingStatus returns the daemon's current (or last) pairing session state as JSON
// (host.PairingState).
func (c *Client) PairingStatus(ctx context.Context) (json.RawMessage, error) {
	var res json.RawMessage
	err := c.do(ctx, http.MethodGet, "/v1/pair", nil, nil, &res)
	return res, err
}

// JoinPairing asks the daemon to join the inviter at addr with token; it returns the session
// state (host.PairingState JSON) with the code for the user to compare.
func (c *Client) JoinPairing(ctx context.Context, addr, token string) (json.RawMessage, error) {
	var res json.RawMessage
	err := c.do(ctx, http.MethodPost, "/v1/pair/join", nil, pairJoinRequest{Addr: addr, Token: token}, &res)
	return res, err
}

// ConfirmPairing gives this side's answer to the code and waits for the other side's: it returns
// the pinned peer when both accepted. Ending ctx cancels the session.
func (c *Client) ConfirmPairing(ctx context.Context, accept bool) (api.Peer, error) {
	var res api.Peer
	err := c.do(ctx, http.MethodPost, "/v1/pair/confirm", nil, pairConfirmRequest{Accept: &accept}, &res)
	return res, err
}

// CancelPairing ends the daemon's open pairing session without pinning.
func (c *Client) CancelPairing(ctx context.Context) error {
	return c.do(ctx, http.MethodPost, "/v1/pair/cancel", nil, struct{}{}, nil)
}
