package mbx

import "encoding/json"

// The LAN wire, host to host. Every request but the two GETs carries a signed LAN hop
// (SignLANHop) that the receiver checks against the pinned key of the host it names.
//
//	POST /v2/envelopes  {"envelopes":[<sealed envelope>…]}  → {"results":[{"id","status","accept"?,"sig"?}…]}
//	POST /v1/envelopes  the same, for 0.5.x senders (a signed plaintext envelope is accepted)
//	POST /v1/receipts   {"receipts":[{rec, sig}…≤200]}      → {"results":[{"item","status","accept"?,"sig"?}…]}
//	GET  /v2/enc-key    → the host's signed v2 enc-key ad {ad, sig}
//	GET  /v2/status     → {host, host_pubkey, version}
//
// A status is StatusAccepted, StatusDuplicate, "stale" (receipts) or StatusRejectedPrefix and a
// reason; a stored item's result carries the receiver's signed LAN accept statement (LANAccept).
// An unpaired host or a bad hop is answered 401 {"error"} and nothing is stored. Bodies
// are capped at MaxLANBody (413).
const (
	PathLANEnvelopes   = "/v2/envelopes"
	PathLANEnvelopesV1 = "/v1/envelopes"
	PathLANReceipts    = "/v1/receipts"
	PathLANEncKey      = "/v2/enc-key"
	PathLANStatus      = "/v2/status"

	// MaxLANBody caps a LAN request body: one sealed envelope of the largest body fits.
	MaxLANBody = 1<<20 + 64<<10
	// MaxLANEnvelopes caps the envelopes of one request.
	MaxLANEnvelopes = 200
)

// EnvelopesRequest is the body of POST /v2/envelopes. Each envelope is kept raw: it is verified
// over the bytes received.
type EnvelopesRequest struct {
	Envelopes []json.RawMessage `json:"envelopes"`
}

// EnvelopeResult is one entry of the answer to POST /v2/envelopes. An accepted or duplicate
// envelope carries the receiver's LAN accept statement (LANAccept, exactly as signed) and its
// host key's signature over it; 0.5.x receivers send neither.
type EnvelopeResult struct {
	ID     string          `json:"id"`
	Status string          `json:"status"` // accepted, duplicate, rejected:<reason>
	Accept json.RawMessage `json:"accept,omitempty"`
	Sig    string          `json:"sig,omitempty"`
}

// EnvelopesResponse is the answer to POST /v2/envelopes.
type EnvelopesResponse struct {
	Results []EnvelopeResult `json:"results"`
}

// ReceiptResult is one entry of the answer to POST /v1/receipts. An accepted, duplicate or stale
// receipt carries the receiver's LAN accept statement and signature, as EnvelopeResult does.
type ReceiptResult struct {
	Item   string          `json:"item"`
	Status string          `json:"status"` // accepted, duplicate, stale, rejected:<reason>
	Accept json.RawMessage `json:"accept,omitempty"`
	Sig    string          `json:"sig,omitempty"`
}

// ReceiptsResponse is the answer to POST /v1/receipts.
type ReceiptsResponse struct {
	Results []ReceiptResult `json:"results"`
}

// LANStatus is the answer to GET /v2/status.
type LANStatus struct {
	Host       string `json:"host"`
	HostPubkey string `json:"host_pubkey"`
	Version    string `json:"version"`
}
