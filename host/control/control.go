package control

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

	"github.com/agentmbx/agentmbx/api"
)

// Limits of the control socket's server side.
const (
	// MaxRequestBody caps a request body: a send carries at most 256 KiB of body, which JSON
	// escaping can grow several times over.
	MaxRequestBody = 2 << 20
	// MaxCardBody caps the body of POST /v1/peers (a host card is well under 2 KiB).
	MaxCardBody = 64 << 10
)

// NewHandler returns the server side of the control-socket protocol: it answers the routes in the
// api package's documentation by calling svc, and turns svc's errors into api.Error answers (code
// by the error's own Code, else svc's api.ErrorCoder if it has one, else api.CodeOf; hint by the
// error's Hint method, if any). A host daemon serves it on its socket.
//
// The pairing routes are served when pairing is not nil, the relay routes when svc also
// implements api.RelayService, GET /v1/card when it implements api.CardIssuer, GET
// /v1/events when it implements api.EventService and POST /v1/notices when it implements
// api.NoticeService.
func NewHandler(svc api.Service, pairing api.PairingService) http.Handler {
	h := &handler{svc: svc, pair: pairing}
	h.coder, _ = svc.(api.ErrorCoder)
	return h
}

type handler struct {
	svc   api.Service
	coder api.ErrorCoder     // nil when svc does not classify its errors
	pair  api.PairingService // nil: the pairing routes answer errNoPairing
}

// route is one endpoint: it decodes the request, calls the service and returns the answer.
type route func(h *handler, w http.ResponseWriter, r *http.Request) (any, error)

var routes = map[string]map[string]route{
	"/v1/send":   {http.MethodPost: (*handler).send},
	"/v1/inbox":  {http.MethodGet: (*handler).inbox},
	"/v1/read":   {http.MethodPost: (*handler).read},
	"/v1/ack":    {http.MethodPost: (*handler).ack},
	"/v1/sent":   {http.MethodGet: (*handler).sent},
	"/v1/outbox": {http.MethodGet: (*handler).outbox},

	"/v1/outbox/retry": {http.MethodPost: (*handler).outboxRetry},
	"/v1/outbox/page":  {http.MethodGet: (*handler).outboxPage},
	"/v1/agents":       {http.MethodGet: (*handler).agents, http.MethodPost: (*handler).addAgent},
	"/v1/peers":        {http.MethodGet: (*handler).peers, http.MethodPost: (*handler).addPeer, http.MethodDelete: (*handler).removePeer},
	"/v1/wait":         {http.MethodGet: (*handler).wait},
	"/v1/status":       {http.MethodGet: (*handler).status},
	"/v1/card":         {http.MethodGet: (*handler).card},

	"/v1/inbox/page":   {http.MethodGet: (*handler).inboxPage},
	"/v1/wait/new":     {http.MethodGet: (*handler).waitNew},
	"/v1/thread":       {http.MethodGet: (*handler).thread},
	"/v1/search":       {http.MethodGet: (*handler).search},
	"/v1/reply":        {http.MethodPost: (*handler).reply},
	"/v1/agents/known": {http.MethodGet: (*handler).knownAgents},
	"/v1/events":       {http.MethodGet: (*handler).events},
	"/v1/notices":      {http.MethodPost: (*handler).notices},

	"/v1/pair":         {http.MethodGet: (*handler).pairStatus},
	"/v1/pair/start":   {http.MethodPost: (*handler).pairStart},
	"/v1/pair/wait":    {http.MethodGet: (*handler).pairWait},
	"/v1/pair/join":    {http.MethodPost: (*handler).pairJoin},
	"/v1/pair/confirm": {http.MethodPost: (*handler).pairConfirm},
	"/v1/pair/cancel":  {http.MethodPost: (*handler).pairCancel},

	"/v1/relay":            {http.MethodGet: (*handler).relayStatus},
	"/v1/relay/set":        {http.MethodPost: (*handler).relaySet},
	"/v1/relay/unset":      {http.MethodPost: (*handler).relayUnset},
	"/v1/relay/quarantine": {http.MethodGet: (*handler).relayQuarantine},

	"/v1/relay/quarantine/release": {http.MethodPost: (*handler).quarantineRelease},
	"/v1/relay/quarantine/purge":   {http.MethodPost: (*handler).quarantinePurge},

	"/v1/daemon":        {http.MethodGet: (*handler).daemonStatus},
	"/v1/daemon/stop":   {http.MethodPost: (*handler).daemonStop},
	"/v1/daemon/rotate": {http.MethodPost: (*handler).daemonRotate},
	"/v1/resolve":       {http.MethodGet: (*handler).resolve},
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	methods, ok := routes[r.URL.Path]
	if !ok {
		writeError(w, api.NewError(api.CodeNotFound, "no such route: "+r.URL.Path, "the daemon may be of another version; compare `agentmbx version` with the daemon's"), "")
		return
	}
	fn, ok := methods[r.Method]
	if !ok {
		w.Header().Set("Allow", allow(methods))
		writeError(w, api.NewError(api.CodeBadRequest, fmt.Sprintf("method %s not allowed on %s", r.Method, r.URL.Path), ""), "")
		return
	}
	res, err := fn(h, w, r)
	if err != nil {
		code := ""
		if h.coder != nil {
			code = h.coder.ErrorCode(err)
		}
		writeError(w, err, code)
		return
	}
	if _, ok := res.(streamed); ok {
		return
	}
	if raw, ok := res.(json.RawMessage); ok {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(raw) // a client gone mid-answer has nothing left to tell
		return
	}
	writeJSON(w, http.StatusOK, res)
}

func allow(methods map[string]route) string {
	var ms []string
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodDelete} {
		if _, ok := methods[m]; ok {
			ms = append(ms, m)
		}
	}
	return strings.Join(ms, ", ")
}

func (h *handler) send(w http.ResponseWriter, r *http.Request) (any, error) {
	var req api.SendRequest
	if err := decode(w, r, MaxRequestBody, &req); err != nil {
		return nil, err
	}
	return h.svc.Send(r.Context(), req)
}

func (h *handler) inbox(_ http.ResponseWriter, r *http.Request) (any, error) {
	q := r.URL.Query()
	all, err := boolParam(q.Get("all"))
	if err != nil {
		return nil, err
	}
	msgs, err := h.svc.Inbox(r.Context(), q.Get("agent"), all)
	return nonNil(msgs), err
}

func (h *handler) read(w http.ResponseWriter, r *http.Request) (any, error) {
	var req api.ReadRequest
	if err := decode(w, r, MaxRequestBody, &req); err != nil {
		return nil, err
	}
	return h.svc.Read(r.Context(), req)
}

func (h *handler) ack(w http.ResponseWriter, r *http.Request) (any, error) {
	var req api.AckRequest
	if err := decode(w, r, MaxRequestBody, &req); err != nil {
		return nil, err
	}
	return h.svc.Ack(r.Context(), req)
}

func (h *handler) sent(_ http.ResponseWriter, r *http.Request) (any, error) {
	s, err := h.svc.Sent(r.Context(), r.URL.Query().Get("id"))
	if s.Recipients == nil {
		s.Recipients = []api.Recipient{}
	}
	if s.Rows == nil {
		s.Rows = []api.OutboxRow{}
	}
	return s, err
}

func (h *handler) outbox(_ http.ResponseWriter, r *http.Request) (any, error) {
	rows, err := h.svc.Outbox(r.Context())
	return nonNil(rows), err
}

func (h *handler) agents(_ http.ResponseWriter, r *http.Request) (any, error) {
	as, err := h.svc.Agents(r.Context())
	return nonNil(as), err
}

func (h *handler) addAgent(w http.ResponseWriter, r *http.Request) (any, error) {
	var a api.Agent
	if err := decode(w, r, MaxRequestBody, &a); err != nil {
		return nil, err
	}
	return h.svc.AddAgent(r.Context(), a)
}

func (h *handler) peers(_ http.ResponseWriter, r *http.Request) (any, error) {
	ps, err := h.svc.Peers(r.Context())
	return nonNil(ps), err
}

func (h *handler) addPeer(w http.ResponseWriter, r *http.Request) (any, error) {
	card, err := readBody(w, r, MaxCardBody)
	if err != nil {
		return nil, err
	}
	return h.svc.AddPeer(r.Context(), card)
}

func (h *handler) removePeer(_ http.ResponseWriter, r *http.Request) (any, error) {
	if err := h.svc.RemovePeer(r.Context(), r.URL.Query().Get("host")); err != nil {
		return nil, err
	}
	return struct{}{}, nil
}

func (h *handler) wait(_ http.ResponseWriter, r *http.Request) (any, error) {
	q := r.URL.Query()
	timeout, err := waitParam(q.Get("timeout"))
	if err != nil {
		return nil, err
	}
	msgs, err := h.svc.Wait(r.Context(), q.Get("agent"), timeout)
	if err != nil && r.Context().Err() != nil {
		// The caller went away; nobody reads this answer.
		return nil, context.Cause(r.Context())
	}
	return nonNil(msgs), err
}

func (h *handler) status(_ http.ResponseWriter, r *http.Request) (any, error) {
	st, err := h.svc.Status(r.Context())
	st.Daemon = true
	return st, err
}

func (h *handler) card(_ http.ResponseWriter, r *http.Request) (any, error) {
	ci, ok := h.svc.(api.CardIssuer)
	if !ok {
		return nil, api.NewError(api.CodeNotFound, "this daemon does not issue host cards", "")
	}
	card, err := ci.Card(r.Context(), r.URL.Query().Get("addr"))
	if err != nil {
		return nil, err
	}
	if !json.Valid(card) {
		return nil, fmt.Errorf("control: host card is not JSON: %w", api.ErrInternal)
	}
	return json.RawMessage(card), nil
}

// nonNil makes a nil list answer [] rather than null.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// waitParam reads a long poll's timeout ("" is api.DefaultWait).
func waitParam(s string) (time.Duration, error) {
	if s == "" {
		return api.DefaultWait, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 || d > api.MaxWait {
		return 0, api.NewError(api.CodeBadRequest, fmt.Sprintf("bad wait timeout %q", s), fmt.Sprintf("a duration from 0s to %s, like 30s", api.MaxWait))
	}
	return d, nil
}

func boolParam(s string) (bool, error) {
	switch s {
	case "", "0", "false":
		return false, nil
	case "1", "true":
		return true, nil
	}
	return false, api.NewError(api.CodeBadRequest, fmt.Sprintf("bad boolean %q", s), "use 1 or 0")
}

// readBody reads a request body of at most limit bytes.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, api.NewError(api.CodeTooLarge, fmt.Sprintf("request body over %d bytes", limit), "")
		}
		return nil, api.NewError(api.CodeBadRequest, "read request: "+err.Error(), "")
	}
	return data, nil
}

// decode reads one JSON object into v, refusing unknown fields and trailing data, so that a typo
// in a hand-written request is an error rather than a silently dropped field.
func decode(w http.ResponseWriter, r *http.Request, limit int64, v any) error {
	data, err := readBody(w, r, limit)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return api.NewError(api.CodeBadRequest, "bad request body: "+err.Error(), "")
	}
	if dec.More() {
		return api.NewError(api.CodeBadRequest, "bad request body: data after the JSON object", "")
	}
	return nil
}

// writeError answers err as an api.Error. Its code is the one the error names itself (an
// api.Coder in its chain: the handler's own errors and the host's sentinels), else code when set
// (the service's ErrorCoder), else api.CodeOf's.
func writeError(w http.ResponseWriter, err error, code string) {
	ae := api.Error{Error: err.Error(), Code: code}
	var c api.Coder
	switch {
	case errors.As(err, &c) && c.Code() != "":
		ae.Code = c.Code()
	case code != "":
	default:
		ae.Code = api.CodeOf(err)
	}
	var h interface{ Hint() string }
	if errors.As(err, &h) {
		ae.Hint = h.Hint()
	}
	writeJSON(w, api.StatusOf(ae.Code), ae)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		status = http.StatusInternalServerError
		buf.Reset()
		fmt.Fprintf(&buf, `{"error":"encode answer failed","code":%q}`+"\n", api.CodeInternal)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes()) // a client gone mid-answer has nothing left to tell
}
