package sim

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
)

// The simulated network. A request a node makes (through the http.Client the sim gives it) does
// not reach its server when it is made: RoundTrip parks the calling task and hands the request to
// the driver, which later delivers it (the server's handler runs, and its answer is parked in
// turn), drops it, delivers it twice, or leaves it waiting while other things happen. An answer is
// likewise delivered to the waiting task or dropped: a lost response, after the server committed.

// errNet is what a node sees for a request or an answer the network lost.
var errNet = errors.New("sim: connection reset")

// message is one request on the simulated network, and then its answer.
type message struct {
	id       int
	task     *task
	from, to string // node names
	method   string
	url      string
	header   http.Header
	body     []byte
	served   bool // the server handled it: resp/code/rbody is its answer
	code     int
	rheader  http.Header
	rbody    []byte
	reply    chan reply
	original *http.Request
}

type reply struct {
	resp *http.Response
	err  error
}

func (m *message) String() string {
	path := m.url
	if i := strings.Index(path, "//"); i >= 0 {
		if j := strings.IndexByte(path[i+2:], '/'); j >= 0 {
			path = path[i+2+j:]
		}
	}
	return fmt.Sprintf("#%d %s→%s %s %s", m.id, m.from, m.to, m.method, path)
}

// transport is the http.RoundTripper of one node.
type transport struct {
	w    *world
	from string
}

// RoundTrip parks the request with the driver and waits for its fate. It runs on the task that
// made the request, which is the one task running (the driver waits for it to park or end).
func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		b, err := io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, err
		}
		body = b
	}
	tk := t.w.cur
	if tk == nil || tk.dead {
		// A request of a crashed node (its task runs on to its end with a closed store).
		return nil, errNet
	}
	to, ok := t.w.route(req.URL.Host)
	if !ok {
		return nil, fmt.Errorf("sim: no route to %s", req.URL.Host)
	}
	t.w.nextMsg++
	m := &message{id: t.w.nextMsg, task: tk, from: t.from, to: to, method: req.Method, url: req.URL.String(),
		header: req.Header.Clone(), body: body, reply: make(chan reply), original: req}
	t.w.yield <- yieldMsg{t: tk, msg: m}
	r := <-m.reply
	return r.resp, r.err
}

// serve runs the request on its server's handler and keeps the answer (the message becomes a
// pending answer). A server that is down refuses the connection: the caller gets an error.
func (w *world) serve(m *message) bool {
	h := w.handler(m.to)
	if h == nil {
		return false
	}
	req := httptest.NewRequest(m.method, m.url, bytes.NewReader(m.body))
	req.Header = m.header.Clone()
	req.RemoteAddr = w.ip(m.from) + ":40000"
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	m.served, m.code, m.rheader, m.rbody = true, rec.Code, rec.Header().Clone(), rec.Body.Bytes()
	if m.to == relayNode {
		w.observeRelay(m)
	}
	return true
}

// answer makes the http.Response of a served message.
func (m *message) answer() *http.Response {
	h := m.rheader.Clone()
	h.Set("Content-Length", strconv.Itoa(len(m.rbody)))
	return &http.Response{
		Status: strconv.Itoa(m.code) + " " + http.StatusText(m.code), StatusCode: m.code,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Header: h,
		Body: io.NopCloser(bytes.NewReader(m.rbody)), ContentLength: int64(len(m.rbody)), Request: m.original,
	}
}
