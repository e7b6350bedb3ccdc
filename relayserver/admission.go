package relayserver

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/agentmbx/agentmbx/internal/bodylimit"
	"github.com/agentmbx/agentmbx/mbx"
)

// admit runs every request that may carry a body (anything but GET and HEAD) under the
// per-address limit of requests in flight and gives it a ticket on the body budget, with its
// shares (budgetShares), returned when the handler is done. A client over its limit gets 503 with
// Retry-After before anything is read.
func (s *Server) admit(w http.ResponseWriter, r *http.Request, st *reqState) {
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		s.mux.ServeHTTP(w, r)
		return
	}
	ck := clientKey(r, s.opt.TrustProxy)
	if !s.inflight.acquire(ck) {
		w.Header().Set("Connection", "close") // the body is not read
		s.writeError(w, r, fmt.Errorf("%w: too many requests in flight from this address", ErrBusy))
		return
	}
	defer s.inflight.release(ck)
	st.ticket = s.budget.Ticket(s.budgetShares(r)...)
	defer st.ticket.Release()
	s.mux.ServeHTTP(w, r)
}

// The hop header names as net/http keeps them: a lookup with these spellings does not convert
// the name, and so allocates nothing.
var (
	hdrKey  = http.CanonicalHeaderKey(mbx.HeaderKey)
	hdrSig  = http.CanonicalHeaderKey(mbx.HeaderSig)
	hdrTS   = http.CanonicalHeaderKey(mbx.HeaderTS)
	hdrHost = http.CanonicalHeaderKey(mbx.HeaderHost)
)

// hopCaller is what the headers of a hop say about its caller, checked before the body is read.
type hopCaller struct {
	// cands are the enrolments whose key may have signed the hop: the one of x-mbx-key, or the
	// live ones of the x-mbx-host name for a v1 hop.
	cands []Enrolment
}

// checkHopHeaders checks what can be checked of a hop before its body is read: the headers are
// there, x-mbx-key is a host key, the timestamp is within the window, and the key (or, for a v1
// hop, the name) is enrolled. An unknown key is answered at once, as an unenrolled caller.
func (s *Server) checkHopHeaders(r *http.Request) (hopCaller, error) {
	h := r.Header
	key := h.Get(hdrKey)
	if h.Get(hdrSig) == "" || h.Get(hdrTS) == "" || (key == "" && h.Get(hdrHost) == "") {
		return hopCaller{}, fmt.Errorf("%w: missing x-mbx headers", mbx.ErrBadHop)
	}
	if key != "" && !mbx.ValidPublicKey(key) {
		return hopCaller{}, fmt.Errorf("%w: x-mbx-key is not a host key", mbx.ErrBadHop)
	}
	if err := mbx.CheckRelayHopTime(h, s.opt.Clock()); err != nil {
		return hopCaller{}, err
	}
	if key == "" {
		return s.v1Candidates(r)
	}
	e, err := s.store.Enrolment(r.Context(), key)
	if errors.Is(err, ErrNotFound) {
		return hopCaller{}, ErrNotEnrolled
	}
	if err != nil {
		return hopCaller{}, err
	}
	return hopCaller{cands: []Enrolment{e}}, nil
}

// v1Candidates finds the live enrolments a v1 hop (no x-mbx-key) may come from, by name, unless
// the name is crowded.
func (s *Server) v1Candidates(r *http.Request) (hopCaller, error) {
	es, err := s.store.EnrolmentsByName(r.Context(), r.Header.Get(hdrHost), mbx.MaxEnrolmentsPerName+1)
	if err != nil {
		return hopCaller{}, err
	}
	if len(es) > mbx.MaxEnrolmentsPerName {
		return hopCaller{}, fmt.Errorf("%w: host name is ambiguous on this relay, use x-mbx-key", mbx.ErrBadHop)
	}
	if len(es) == 0 {
		return hopCaller{}, ErrNotEnrolled
	}
	return hopCaller{cands: es}, nil
}

// verify checks the hop's signature over body against the candidates and returns the caller's
// live enrolment. A revoked key is named only to a caller that proved it holds the key.
func (s *Server) verify(r *http.Request, c hopCaller, body []byte) (Enrolment, error) {
	path := mbx.RelaySignedPath(r.URL)
	last := ErrNotEnrolled
	for _, e := range c.cands {
		err := mbx.VerifyRelayHop(e.HostPubkey, r.Header, r.Method, path, body, s.opt.Clock())
		if err != nil {
			last = err
			continue
		}
		if !e.Live() {
			return Enrolment{}, fmt.Errorf("host key %s: %w", mbx.Fingerprint(e.HostPubkey), ErrRevoked)
		}
		if err := deniedEnrolment(e); err != nil {
			return Enrolment{}, err
		}
		if err := s.expiredProof(e); err != nil {
			return Enrolment{}, err
		}
		return e.Rights(s.opt.Clock()), nil
	}
	return Enrolment{}, last
}

// authenticate checks the hop of a request without a body (or whose body is already read) and
// returns the caller's live enrolment.
func (s *Server) authenticate(r *http.Request, body []byte) (Enrolment, error) {
	c, err := s.checkHopHeaders(r)
	if err != nil {
		return Enrolment{}, err
	}
	return s.verify(r, c, body)
}

// signedBody checks the hop's headers, then reads r's body (at most max bytes, checked while
// streaming, within the body budget; sc, when not nil, watches it arrive and may refuse it before
// the rest is read) and checks the signature, returning the caller's live enrolment and the body.
// On a failure it has answered r and ok is false.
func (s *Server) signedBody(w http.ResponseWriter, r *http.Request, max int64, sc bodylimit.Scanner) (caller Enrolment, body []byte, ok bool) {
	caller, body, err := s.readSigned(w, r, max, sc)
	if err != nil {
		s.writeError(w, r, err)
		return Enrolment{}, nil, false
	}
	return caller, body, true
}

// readSigned is signedBody without the answer: the failure is returned.
func (s *Server) readSigned(w http.ResponseWriter, r *http.Request, max int64, sc bodylimit.Scanner) (caller Enrolment, body []byte, err error) {
	c, err := s.checkHopHeaders(r)
	if err == nil {
		body, err = readBody(w, r, max, sc)
	}
	if err == nil {
		caller, err = s.verify(r, c, body)
	}
	return caller, body, err
}

// retryAfter is the Retry-After of a 503 from a spent budget or a full relay, in seconds.
var retryAfter = strconv.Itoa(5)
