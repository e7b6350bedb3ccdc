package control

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/agentmbx/agentmbx/api"
)

// errNoPairing answers the pairing routes of a handler made without a PairingService.
var errNoPairing = api.NewError(api.CodeNotFound, "this daemon does not pair over its control socket",
	"stop the daemon, pair (the pair command serves the LAN itself), then start the daemon again")

func (h *handler) pairStart(w http.ResponseWriter, r *http.Request) (any, error) {
	if h.pair == nil {
		return nil, errNoPairing
	}
	var req api.PairStartRequest
	if err := decode(w, r, MaxRequestBody, &req); err != nil {
		return nil, err
	}
	var ttl time.Duration
	if req.TTL != "" {
		d, err := time.ParseDuration(req.TTL)
		if err != nil || d < 0 {
			return nil, api.NewError(api.CodeBadRequest, fmt.Sprintf("bad pairing ttl %q", req.TTL), "a duration like 10m")
		}
		ttl = d
	}
	tok, err := h.pair.StartPairing(r.Context(), ttl)
	if err != nil {
		return nil, err
	}
	return api.PairStartAnswer{Token: tok}, nil
}

func (h *handler) pairStatus(_ http.ResponseWriter, r *http.Request) (any, error) {
	if h.pair == nil {
		return nil, errNoPairing
	}
	return h.pair.PairingStatus(r.Context())
}

// pairWait holds the request until the session leaves the state ?from= or ?timeout= passes
// (default api.DefaultPairWait), and answers the state then.
func (h *handler) pairWait(_ http.ResponseWriter, r *http.Request) (any, error) {
	if h.pair == nil {
		return nil, errNoPairing
	}
	q := r.URL.Query()
	var from api.PairState
	if err := from.UnmarshalText([]byte(q.Get("from"))); err != nil {
		return nil, api.NewError(api.CodeBadRequest, fmt.Sprintf("bad pairing state %q", q.Get("from")), "a state like waiting or joining")
	}
	timeout := api.DefaultPairWait
	if s := q.Get("timeout"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 || d > api.MaxPairWait {
			return nil, api.NewError(api.CodeBadRequest, fmt.Sprintf("bad wait timeout %q", s),
				fmt.Sprintf("a duration from 0s to %s, like 30s", api.MaxPairWait))
		}
		timeout = d
	}
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()
	st, err := h.pair.WaitPairing(ctx, from)
	if err != nil && r.Context().Err() == nil && ctx.Err() != nil {
		return st, nil // the timeout passed: the answer is the state as it stands
	}
	return st, err
}

func (h *handler) pairJoin(w http.ResponseWriter, r *http.Request) (any, error) {
	if h.pair == nil {
		return nil, errNoPairing
	}
	var req api.PairJoinRequest
	if err := decode(w, r, MaxRequestBody, &req); err != nil {
		return nil, err
	}
	return h.pair.JoinPairing(r.Context(), req.Addr, req.Token)
}

func (h *handler) pairConfirm(w http.ResponseWriter, r *http.Request) (any, error) {
	if h.pair == nil {
		return nil, errNoPairing
	}
	var req api.PairConfirmRequest
	if err := decode(w, r, MaxRequestBody, &req); err != nil {
		return nil, err
	}
	if req.Accept == nil {
		return nil, api.NewError(api.CodeBadRequest, `pairing confirmation without "accept"`, "")
	}
	return h.pair.ConfirmPairing(r.Context(), *req.Accept)
}

func (h *handler) pairCancel(_ http.ResponseWriter, r *http.Request) (any, error) {
	if h.pair == nil {
		return nil, errNoPairing
	}
	if err := h.pair.CancelPairing(r.Context()); err != nil {
		return nil, err
	}
	return struct{}{}, nil
}
