package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/agentmbx/agentmbx/api"
)

// maxSocketPath is the longest Unix socket path the kernel takes (sun_path is 108 bytes on Linux,
// 104 on the BSDs, including the terminating NUL).
const maxSocketPath = 103

// maxAnswer caps how much of a daemon's answer the client reads (a full inbox can be large).
const maxAnswer = 256 << 20

// Client talks to a host daemon over its control socket. It implements api.Service, so code
// written against api.Service works the same on a daemon and on an open store. A Client is safe
// for concurrent use; Close releases its idle connections.
type Client struct {
	sock string
	hc   *http.Client
}

var _ api.Service = (*Client)(nil)

// SocketPath returns the control socket's path in a host home.
func SocketPath(home string) string { return filepath.Join(home, api.SocketName) }

// Dial connects to the daemon of the host home. It returns an error wrapping ErrNoDaemon when
// nothing listens there (no socket file, or one left by a daemon that is gone). Dial connects
// once to check that something listens; it keeps no connection open.
func Dial(ctx context.Context, home string) (*Client, error) {
	sock := SocketPath(home)
	if len(sock) > maxSocketPath {
		// A daemon could not have bound this path either.
		return nil, fmt.Errorf("client: dial %s: socket path longer than %d bytes: %w", sock, maxSocketPath, ErrNoDaemon)
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", sock)
	if err != nil {
		if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOTDIR) {
			return nil, fmt.Errorf("client: dial %s: %w", sock, ErrNoDaemon)
		}
		return nil, WithHint(fmt.Errorf("client: dial %s: %w", sock, err),
			"check the permissions of the host home; the socket is the daemon owner's alone")
	}
	conn.Close()
	c := &Client{sock: sock}
	c.hc = &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", c.sock)
		},
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     30 * time.Second,
	}}
	return c, nil
}

// Close releases the client's idle connections. Requests in flight are not interrupted.
func (c *Client) Close() error {
	c.hc.CloseIdleConnections()
	return nil
}

// Send accepts a message for delivery; it returns once the daemon has made it durable.
func (c *Client) Send(ctx context.Context, req api.SendRequest) (api.SendResult, error) {
	return call[api.SendResult](ctx, c, http.MethodPost, "/v1/send", nil, req)
}

// Inbox lists an agent's unread mail, or all of it with all.
func (c *Client) Inbox(ctx context.Context, agent string, all bool) ([]api.Message, error) {
	q := url.Values{"agent": {agent}}
	if all {
		q.Set("all", "1")
	}
	return call[[]api.Message](ctx, c, http.MethodGet, "/v1/inbox", q, nil)
}

// Read returns one message of an agent's and marks it read.
func (c *Client) Read(ctx context.Context, req api.ReadRequest) (api.Message, error) {
	return call[api.Message](ctx, c, http.MethodPost, "/v1/read", nil, req)
}

// Ack marks a message acknowledged by the agent, with an optional note.
func (c *Client) Ack(ctx context.Context, req api.AckRequest) (api.Message, error) {
	return call[api.Message](ctx, c, http.MethodPost, "/v1/ack", nil, req)
}

// Sent shows the per-recipient delivery state of a message this host sent.
func (c *Client) Sent(ctx context.Context, id string) (api.Sent, error) {
	return call[api.Sent](ctx, c, http.MethodGet, "/v1/sent", url.Values{"id": {id}}, nil)
}

// Outbox lists the outbox rows.
func (c *Client) Outbox(ctx context.Context) ([]api.OutboxRow, error) {
	return call[[]api.OutboxRow](ctx, c, http.MethodGet, "/v1/outbox", nil, nil)
}

// Agents lists the local agents.
func (c *Client) Agents(ctx context.Context) ([]api.Agent, error) {
	return call[[]api.Agent](ctx, c, http.MethodGet, "/v1/agents", nil, nil)
}

// AddAgent registers a local agent (idempotent; the role may be updated).
func (c *Client) AddAgent(ctx context.Context, a api.Agent) (api.Agent, error) {
	return call[api.Agent](ctx, c, http.MethodPost, "/v1/agents", nil, a)
}

// Peers lists the paired hosts.
func (c *Client) Peers(ctx context.Context) ([]api.Peer, error) {
	return call[[]api.Peer](ctx, c, http.MethodGet, "/v1/peers", nil, nil)
}

// AddPeer pins a peer from its signed host card.
func (c *Client) AddPeer(ctx context.Context, card []byte) (api.Peer, error) {
	return call[api.Peer](ctx, c, http.MethodPost, "/v1/peers", nil, rawBody(card))
}

// RemovePeer unpins a peer.
func (c *Client) RemovePeer(ctx context.Context, host string) error {
	return c.do(ctx, http.MethodDelete, "/v1/peers", url.Values{"host": {host}}, nil, nil)
}

// Wait blocks until the agent has unread mail or timeout passes, and returns the unread mail
// (empty on timeout). It is one long-poll request; ctx may end it earlier.
func (c *Client) Wait(ctx context.Context, agent string, timeout time.Duration) ([]api.Message, error) {
	q := url.Values{"agent": {agent}, "timeout": {timeout.String()}}
	return call[[]api.Message](ctx, c, http.MethodGet, "/v1/wait", q, nil)
}

// Status describes the host. Daemon is always true: the answer came from one.
func (c *Client) Status(ctx context.Context) (api.Status, error) {
	var res api.Status
	err := c.do(ctx, http.MethodGet, "/v1/status", nil, nil, &res)
	res.Daemon = err == nil
	return res, err
}

// Client implements api.CardIssuer over the control socket.
var _ api.CardIssuer = (*Client)(nil)

// Card returns the host's signed host card, naming addr as its LAN address ("" for the address
// the daemon listens on, when it has one).
func (c *Client) Card(ctx context.Context, addr string) ([]byte, error) {
	var res json.RawMessage
	var q url.Values
	if addr != "" {
		q = url.Values{"addr": {addr}}
	}
	err := c.do(ctx, http.MethodGet, "/v1/card", q, nil, &res)
	return []byte(res), err
}

// rawBody is a request body sent as is.
type rawBody []byte

// call makes one request (see do) and returns its answer decoded as T.
func call[T any](ctx context.Context, c *Client, method, path string, q url.Values, in any) (T, error) {
	var res T
	err := c.do(ctx, method, path, q, in, &res)
	return res, err
}

// do sends one request and decodes a 2xx answer into out (unless out is nil) or turns an error
// answer into an *Error.
func (c *Client) do(ctx context.Context, method, path string, q url.Values, in, out any) error {
	var body io.Reader
	if in != nil {
		b, ok := in.(rawBody)
		if !ok {
			var err error
			if b, err = json.Marshal(in); err != nil {
				return fmt.Errorf("client: %s %s: encode request: %w", method, path, err)
			}
		}
		body = bytes.NewReader(b)
	}
	u := "http://agentmbx" + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return fmt.Errorf("client: %s %s: %w", method, path, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return fmt.Errorf("client: %s %s: %w", method, path, ctxErr)
		}
		if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) {
			err = fmt.Errorf("%w (%w)", ErrNoDaemon, err)
		}
		return WithHint(fmt.Errorf("client: %s %s: %w", method, path, err),
			"the daemon stopped answering; check its log, then retry (a send that was not answered may or may not have been accepted: look at `agentmbx outbox`)")
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return fmt.Errorf("client: %s %s: %w", method, path, ctxErr)
		}
		return fmt.Errorf("client: %s %s: read answer: %w", method, path, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return decodeError(resp.StatusCode, data)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("client: %s %s: %w: %w", method, path, ErrProtocol, err)
	}
	return nil
}

// decodeError turns an error answer into an *Error.
func decodeError(status int, data []byte) error {
	var ae api.Error
	if err := json.Unmarshal(data, &ae); err != nil || ae.Error == "" {
		msg := http.StatusText(status)
		if msg == "" {
			msg = "status " + strconv.Itoa(status)
		}
		return &Error{Message: "daemon answered " + msg, Code: api.CodeOfStatus(status), Status: status}
	}
	code := ae.Code
	if code == "" {
		code = api.CodeOfStatus(status)
	}
	return &Error{Message: ae.Error, Code: code, HintMsg: ae.Hint, Status: status}
}
