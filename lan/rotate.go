package lan

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/agentmbx/agentmbx/internal/bodylimit"
	"github.com/agentmbx/agentmbx/internal/logkey"
	"github.com/agentmbx/agentmbx/mbx"
)

// Host key rotation over the LAN.
//
// POST /v1/rotate {"rotation": <signed rotation record>} carries a peer's own rotation (T030). It
// has no hop: the rotated host signs with its new key, which this host does not pin yet, and the
// record authenticates itself (both keys signed it; the old one must be the pinned key). The body
// is capped at mbx.RelaySmallBodyMax before it is read, and the calls of each client address at
// ServerOptions.RotationsPerSecond. Answers: 200 {"ok":true,"applied":B} (applied false: a replay,
// nothing changed), 400 malformed body, 409 refused (the reason), 413 too large, 429 over the
// rate (Retry-After), 500 store error.

// PathLANRotate is the route of a peer's rotation record.
const PathLANRotate = "/v1/rotate"

// ErrRotationRefused is what a RotationApplier wraps when it refuses a record (nothing changed).
var ErrRotationRefused = errors.New("rotation refused")

// RotationApplier applies a peer's signed rotation record (its JSON as received). applied is
// false for a replay of one applied already.
type RotationApplier interface {
	ApplyRotation(ctx context.Context, record []byte) (applied bool, err error)
}

// RotateAnswer is the 200 answer of POST /v1/rotate.
type RotateAnswer struct {
	OK      bool `json:"ok"`
	Applied bool `json:"applied"`
}

// HandleRotations serves POST /v1/rotate on the server's mux with a.
func (s *Server) HandleRotations(a RotationApplier) {
	s.mux.HandleFunc("POST "+PathLANRotate, func(w http.ResponseWriter, r *http.Request) {
		s.handleRotate(w, r, a)
	})
}

func (s *Server) handleRotate(w http.ResponseWriter, r *http.Request, a RotationApplier) {
	if !s.rotate.allow(r, s.opt.Clock()) {
		s.refused.note("", r.URL.Path, "rotation rate exceeded")
		w.Header().Set("Connection", "close") // the body stays unread
		w.Header().Set("Retry-After", "1")
		lanError(w, http.StatusTooManyRequests, "too many rotation calls, retry later")
		return
	}
	body, err := bodylimit.Read(w, r, mbx.RelaySmallBodyMax, ticketOf(r), nil)
	switch {
	case errors.Is(err, bodylimit.ErrTooLarge):
		s.refused.note("", r.URL.Path, "rotation body too large")
		w.Header().Set("Connection", "close")
		lanError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("body over %d bytes", mbx.RelaySmallBodyMax))
		return
	case errors.Is(err, bodylimit.ErrBusy):
		w.Header().Set("Retry-After", "5")
		lanError(w, http.StatusServiceUnavailable, "busy, retry later")
		return
	case err != nil:
		lanError(w, http.StatusBadRequest, "reading body failed")
		return
	}
	var req mbx.RotateRequest
	if err := json.Unmarshal(body, &req); err != nil || len(req.Rotation) == 0 {
		s.refused.note("", r.URL.Path, "malformed rotation body")
		lanError(w, http.StatusBadRequest, `body must be {"rotation":{…}}`)
		return
	}
	applied, err := a.ApplyRotation(r.Context(), req.Rotation)
	switch {
	case errors.Is(err, ErrRotationRefused):
		s.refused.note("", r.URL.Path, "rotation refused")
		lanError(w, http.StatusConflict, clip(err.Error(), 300))
		return
	case err != nil:
		s.opt.Logger.Error("applying a rotation", logkey.Err, err)
		lanError(w, http.StatusInternalServerError, "store error")
		return
	}
	writeLAN(w, http.StatusOK, RotateAnswer{OK: true, Applied: applied})
}

// ErrRotationNotTaken is what PostRotation wraps when the peer answered and refused the record
// (a 4xx but 408 and 429): sending it again does not help.
var ErrRotationNotTaken = errors.New("peer did not take the rotation")

// PostRotation sends this host's signed rotation record to the peer at addr (host:port). It
// returns whether the peer applied it now (false: it had already). An error wrapping
// ErrRotationNotTaken is final for this record; any other error is worth retrying.
func PostRotation(ctx context.Context, doer Doer, addr string, rotation json.RawMessage) (bool, error) {
	if addr == "" {
		return false, errors.New("lan: post rotation: no LAN address")
	}
	body, err := json.Marshal(mbx.RotateRequest{Rotation: rotation})
	if err != nil {
		return false, fmt.Errorf("lan: post rotation: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+PathLANRotate, bytes.NewReader(body))
	if err != nil {
		return false, fmt.Errorf("lan: post rotation: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := doer.Do(req)
	if err != nil {
		return false, fmt.Errorf("lan: post rotation to %s: %w", addr, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxLANAnswer))
	if err != nil {
		return false, fmt.Errorf("lan: post rotation to %s: reading answer: %w", addr, err)
	}
	if resp.StatusCode != http.StatusOK {
		err := answerError(resp.StatusCode, data)
		if resp.StatusCode >= 400 && resp.StatusCode < 500 && resp.StatusCode != http.StatusRequestTimeout && resp.StatusCode != http.StatusTooManyRequests {
			return false, fmt.Errorf("lan: post rotation to %s: %w: %w", addr, ErrRotationNotTaken, err)
		}
		return false, fmt.Errorf("lan: post rotation to %s: %w", addr, err)
	}
	var a RotateAnswer
	if err := json.Unmarshal(data, &a); err != nil || !a.OK {
		return false, fmt.Errorf("lan: post rotation to %s: answer is not {\"ok\":true}", addr)
	}
	return a.Applied, nil
}
