package relayserver

import (
	"errors"
	"net/http"

	"github.com/agentmbx/agentmbx/mbx"
)

// apiError carries the extra fields some error bodies have (the current epoch of a 409, the head
// of a BAD_ACK).
type apiError struct {
	err     error
	epoch   string
	headSeq *int64
}

func (e *apiError) Error() string { return e.err.Error() }
func (e *apiError) Unwrap() error { return e.err }

// errorResponse maps an error of a handler to its HTTP status and body. This is the one place
// where errors meet status codes; every handler answers errors through it.
//
//	mbx.ErrBadHop           401 {"error":"bad relay hop"}
//	ErrNotEnrolled          401 {"error":"bad relay hop"} (as 0.5.x: an unknown key is a bad hop)
//	ErrRevoked              403
//	ErrDenied               403
//	ErrNotFound             404
//	ErrStaleEpoch           409 {"code":"EPOCH","epoch":…} (and head_seq for an ack)
//	ErrNameTaken            409
//	ErrStaleRecord          409
//	ErrTooLarge             413
//	ErrRateLimited          429
//	ErrBadAck               400 {"code":"BAD_ACK","epoch":…,"head_seq":…}
//	ErrBadRequest, record refusals (mbx.ErrBad…)  400
//	ErrBusy, ErrRelayFull, ErrCommit, ErrClosed, ErrStoreFull  503
//	anything else           500 {"error":"internal error"}
func errorResponse(err error) (int, mbx.ErrorResponse) {
	body := mbx.ErrorResponse{Error: err.Error()}
	var ae *apiError
	if errors.As(err, &ae) {
		body.Epoch, body.HeadSeq = ae.epoch, ae.headSeq
	}
	switch {
	case errors.Is(err, mbx.ErrBadHop):
		return http.StatusUnauthorized, mbx.ErrorResponse{Error: "bad relay hop"}
	case errors.Is(err, ErrNotEnrolled):
		return http.StatusUnauthorized, mbx.ErrorResponse{Error: "bad relay hop"}
	case errors.Is(err, ErrRevoked), errors.Is(err, ErrDenied):
		return http.StatusForbidden, body
	case errors.Is(err, ErrNotFound):
		return http.StatusNotFound, body
	case errors.Is(err, ErrStaleEpoch):
		body.Code = mbx.CodeEpoch
		return http.StatusConflict, body
	case errors.Is(err, ErrNameTaken), errors.Is(err, ErrStaleRecord):
		return http.StatusConflict, body
	case errors.Is(err, ErrTooLarge):
		return http.StatusRequestEntityTooLarge, body
	case errors.Is(err, ErrRateLimited):
		return http.StatusTooManyRequests, body
	case errors.Is(err, ErrBadAck):
		body.Code = mbx.CodeBadAck
		return http.StatusBadRequest, body
	case errors.Is(err, ErrBadRequest), errors.Is(err, mbx.ErrBadEnrolment),
		errors.Is(err, mbx.ErrBadEncAd), errors.Is(err, mbx.ErrBadRotation),
		errors.Is(err, mbx.ErrBadSenderList):
		return http.StatusBadRequest, body
	case errors.Is(err, ErrBusy), errors.Is(err, ErrRelayFull):
		return http.StatusServiceUnavailable, body
	case errors.Is(err, ErrCommit), errors.Is(err, ErrClosed), errors.Is(err, ErrStoreFull):
		return http.StatusServiceUnavailable, mbx.ErrorResponse{Error: "relay store unavailable, retry"}
	default:
		return http.StatusInternalServerError, mbx.ErrorResponse{Error: "internal error"}
	}
}
