package lan

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/outbox"
)

// maxLANAnswer caps what a sender reads of a peer's answer.
const maxLANAnswer = 1 << 20

// Identity is the sending host: its name and host key.
type Identity interface {
	Name() string
	Key() mbx.SigningKey
}

// Doer sends the requests (an *http.Client).
type Doer interface {
	Do(req *http.Request) (*http.Response, error)
}

// TransportConfig configures NewTransport. Every field but Port is required.
type TransportConfig struct {
	Identity   Identity
	HTTPClient Doer
	Clock      func() time.Time
	// Port is the port this host's LAN server listens on (sent as the unsigned x-mbx-port hint),
	// or 0; nil: 0.
	Port func() int
}

// Transport sends outbox rows to peers over the LAN with signed hops; it is an outbox.Sender.
type Transport struct{ cfg TransportConfig }

var _ outbox.Sender = (*Transport)(nil)

// NewTransport returns the LAN transport of a host.
func NewTransport(cfg TransportConfig) *Transport {
	if cfg.Port == nil {
		cfg.Port = func() int { return 0 }
	}
	return &Transport{cfg: cfg}
}

// Kind is outbox.TransportLAN.
func (t *Transport) Kind() outbox.Transport { return outbox.TransportLAN }

func (t *Transport) Send(ctx context.Context, peer outbox.Peer, rows []outbox.Row) []outbox.Outcome {
	out := make([]outbox.Outcome, len(rows))
	var env, rec []int
	for i, r := range rows {
		if r.Kind == outbox.KindReceipt {
			rec = append(rec, i)
		} else {
			env = append(env, i)
		}
	}
	// Envelopes in batches that fit the receiver's body cap.
	for len(env) > 0 {
		n, size := 0, 64
		for n < len(env) && n < mbx.MaxLANEnvelopes && (n == 0 || size+len(rows[env[n]].Wire)+1 <= mbx.MaxLANBody-1024) {
			size += len(rows[env[n]].Wire) + 1
			n++
		}
		batch := env[:n]
		env = env[n:]
		res := t.sendEnvelopes(ctx, peer, rows, batch, true)
		for j, i := range batch {
			out[i] = res[j]
		}
	}
	for len(rec) > 0 {
		n := min(len(rec), mbx.ReceiptBatchMax)
		batch := rec[:n]
		rec = rec[n:]
		res := t.sendReceipts(ctx, peer, rows, batch)
		for j, i := range batch {
			out[i] = res[j]
		}
	}
	return out
}

// joinRaw builds {"<field>":[w0,w1,…]} from exact bytes.
func joinRaw(field string, rows []outbox.Row, idx []int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"` + field + `":[`)
	for j, i := range idx {
		if j > 0 {
			b.WriteByte(',')
		}
		b.Write(rows[i].Wire)
	}
	b.WriteString("]}")
	return b.Bytes()
}

// post sends a hop-signed POST to the peer and returns the status and the answer body.
func (t *Transport) post(ctx context.Context, peer outbox.Peer, path string, body []byte) (int, []byte, error) {
	if peer.Addr == "" {
		return 0, nil, fmt.Errorf("no LAN address known for %s", peer.Host)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+peer.Addr+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	hdr := mbx.SignLANHop(t.cfg.Identity.Key(), t.cfg.Identity.Name(), t.cfg.Port(), http.MethodPost, path, body, t.cfg.Clock())
	for k, v := range hdr {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := t.cfg.HTTPClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxLANAnswer))
	if err != nil {
		return resp.StatusCode, nil, fmt.Errorf("reading answer: %w", err)
	}
	return resp.StatusCode, data, nil
}

func answerError(status int, data []byte) error {
	var e struct {
		Error string `json:"error"`
	}
	msg := ""
	if json.Unmarshal(data, &e) == nil {
		msg = e.Error
	}
	if len(msg) > 200 {
		msg = msg[:200]
	}
	s := fmt.Sprintf("peer answered %d %s", status, http.StatusText(status))
	if msg != "" {
		s += ": " + msg
	}
	if status == http.StatusUnauthorized {
		s += " (does the peer still pin this host? are the clocks within 5 minutes?)"
	}
	return errors.New(s)
}

func (t *Transport) sendEnvelopes(ctx context.Context, peer outbox.Peer, rows []outbox.Row, idx []int, split bool) []outbox.Outcome {
	status, data, err := t.post(ctx, peer, mbx.PathLANEnvelopes, joinRaw("envelopes", rows, idx))
	if err != nil {
		return outbox.FailedAll(len(idx), err, true)
	}
	switch {
	case status == http.StatusOK:
	case (status == http.StatusBadRequest || status == http.StatusRequestEntityTooLarge) && len(idx) == 1:
		return []outbox.Outcome{{Kind: outbox.OutcomeRejected, Err: answerError(status, data)}}
	case (status == http.StatusBadRequest || status == http.StatusRequestEntityTooLarge) && split:
		// Find the one the peer cannot take: send them one by one.
		out := make([]outbox.Outcome, 0, len(idx))
		for _, i := range idx {
			out = append(out, t.sendEnvelopes(ctx, peer, rows, []int{i}, false)...)
		}
		return out
	default:
		return outbox.FailedAll(len(idx), answerError(status, data), false)
	}
	var res mbx.EnvelopesResponse
	if err := json.Unmarshal(data, &res); err != nil {
		return outbox.FailedAll(len(idx), errors.New("peer answer is not JSON results"), false)
	}
	byID := map[string]answer{}
	for _, r := range res.Results {
		if _, dup := byID[r.ID]; !dup {
			byID[r.ID] = answer{r.Status, r.Accept, r.Sig}
		}
	}
	return t.outcomes(peer, rows, idx, byID, "envelope", false)
}

func (t *Transport) sendReceipts(ctx context.Context, peer outbox.Peer, rows []outbox.Row, idx []int) []outbox.Outcome {
	status, data, err := t.post(ctx, peer, mbx.PathLANReceipts, joinRaw("receipts", rows, idx))
	if err != nil {
		return outbox.FailedAll(len(idx), err, true)
	}
	if status != http.StatusOK {
		return outbox.FailedAll(len(idx), answerError(status, data), false)
	}
	var res mbx.ReceiptsResponse
	if err := json.Unmarshal(data, &res); err != nil {
		return outbox.FailedAll(len(idx), errors.New("peer answer is not JSON results"), false)
	}
	byItem := map[string]answer{}
	for _, r := range res.Results {
		if _, dup := byItem[r.Item]; !dup {
			byItem[r.Item] = answer{r.Status, r.Accept, r.Sig}
		}
	}
	return t.outcomes(peer, rows, idx, byItem, "receipt", true)
}

// answer is the peer's result for one item: its status and LAN accept statement.
type answer struct {
	status string
	accept json.RawMessage
	sig    string
}

// outcomes turns the peer's answer for each item (by item id) into the outcomes of rows idx: what
// names the kind of item in errors; staleOK counts "stale" (a receipt the peer no longer needs)
// as stored. An item the answer says is stored is delivered only with a LAN accept statement
// from the peer's pinned key for this host, the row's item id and the hash of the row's wire
// bytes; without one it is OutcomeLANUnsigned (the host decides what that means for the row),
// with one that does not verify also BadStatement.
func (t *Transport) outcomes(peer outbox.Peer, rows []outbox.Row, idx []int, byID map[string]answer, what string, staleOK bool) []outbox.Outcome {
	own := t.cfg.Identity.Key().PublicKey()
	out := make([]outbox.Outcome, len(idx))
	for j, i := range idx {
		a, ok := byID[rows[i].ItemID]
		st := a.status
		switch {
		case !ok:
			out[j] = outbox.Outcome{Kind: outbox.OutcomeFailed, Err: errors.New("peer answer has no result for the " + what)}
		case st == mbx.StatusAccepted || st == mbx.StatusDuplicate || (staleOK && st == "stale"):
			err := mbx.ValidLANAccept(a.accept, a.sig, peer.HostPubkey, own, rows[i].ItemID, mbx.WireHash(rows[i].Wire))
			switch {
			case err == nil:
				out[j] = outbox.Outcome{Kind: outbox.OutcomeDelivered}
			case errors.Is(err, mbx.ErrLANAcceptMissing):
				out[j] = outbox.Outcome{Kind: outbox.OutcomeLANUnsigned, Err: fmt.Errorf("%s answered %s %s without a signed statement", peer.Addr, what, st)}
			default:
				out[j] = outbox.Outcome{Kind: outbox.OutcomeLANUnsigned, BadStatement: true,
					Err: fmt.Errorf("%s answered %s %s with a statement the pinned key did not make: %w", peer.Addr, what, st, err)}
			}
		case strings.HasPrefix(st, mbx.StatusRejectedPrefix):
			out[j] = outbox.Outcome{Kind: outbox.OutcomeRejected, Err: errors.New(st)}
		default:
			out[j] = outbox.Outcome{Kind: outbox.OutcomeFailed, Err: errors.New("peer answered status " + clip(st, 100))}
		}
	}
	return out
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
