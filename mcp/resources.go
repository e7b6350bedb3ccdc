package mcp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentmbx/agentmbx/api"
)

// The agent's mail as resources a client can read and subscribe to:
//
//	mbx://inbox         the unread mail, listed as mbx_inbox lists it (reading it moves nothing)
//	mbx://thread/{id}   the thread of a message (or a thread id), as mbx_thread shows it
//
// Their texts fence other agents' words as the tools do. A subscriber gets
// notifications/resources/updated for mbx://inbox when mail for the agent is delivered, and for
// a thread when mail in that thread is: the server holds the daemon's delivery-event stream
// (GET /v1/events) open while any session is subscribed, so a notification follows the
// mailbox's commit without polling the mailbox. When the daemon is not running, or its stream
// breaks, the stream is dialled again with a backoff, and once it is back every subscribed
// resource is announced as updated (mail may have come meanwhile).

const (
	// InboxURI is the resource of the agent's unread mail.
	InboxURI = "mbx://inbox"
	// ThreadURITemplate is the resource template of a thread.
	ThreadURITemplate = "mbx://thread/{id}"
	threadPrefix      = "mbx://thread/"
)

// Backoff of the event stream's redial while the daemon is away.
const (
	minRedial = 250 * time.Millisecond
	maxRedial = 30 * time.Second
)

// watcher turns the daemon's delivery events into resource notifications.
type watcher struct {
	t      *tools
	srv    *sdk.Server
	logger *slog.Logger

	mu       sync.Mutex
	sessions map[*sdk.ServerSession]map[string]string // subscribed URI → its thread id ("" for the inbox)
	stop     context.CancelFunc                       // ends the event stream; nil when none runs
}

func (w *watcher) addResources(s *sdk.Server) {
	s.AddResource(&sdk.Resource{URI: InboxURI, Name: "inbox", MIMEType: "text/plain",
		Description: "Your unread mail; subscribe to hear of new mail."}, w.readInbox)
	s.AddResourceTemplate(&sdk.ResourceTemplate{URITemplate: ThreadURITemplate, Name: "thread", MIMEType: "text/plain",
		Description: "A message's thread; subscribe to hear of new mail in it."}, w.readThread)
}

func (w *watcher) readInbox(ctx context.Context, req *sdk.ReadResourceRequest) (*sdk.ReadResourceResult, error) {
	_, txt, err := w.t.listing(ctx, api.InboxRequest{Agent: w.t.agent, Peek: true}, "unread")
	if err != nil {
		return nil, explain(err)
	}
	return &sdk.ReadResourceResult{Contents: []*sdk.ResourceContents{{URI: req.Params.URI, MIMEType: "text/plain", Text: txt}}}, nil
}

// threadID is the message or thread id a thread URI names.
func threadID(uri string) (string, bool) {
	id, ok := strings.CutPrefix(uri, threadPrefix)
	return id, ok && id != "" && len(id) <= 300 && !strings.ContainsAny(id, "/?#")
}

func (w *watcher) readThread(ctx context.Context, req *sdk.ReadResourceRequest) (*sdk.ReadResourceResult, error) {
	id, ok := threadID(req.Params.URI)
	if !ok {
		return nil, sdk.ResourceNotFoundError(req.Params.URI)
	}
	_, txt, err := w.t.threadOf(ctx, id)
	if api.CodeOf(err) == api.CodeNotFound {
		return nil, sdk.ResourceNotFoundError(req.Params.URI)
	}
	if err != nil {
		return nil, explain(err)
	}
	return &sdk.ReadResourceResult{Contents: []*sdk.ResourceContents{{URI: req.Params.URI, MIMEType: "text/plain", Text: txt}}}, nil
}

// subscribe records a session's subscription to one of the agent's resources (a thread is
// looked up, so that a message id names its thread) and starts the event stream for the first
// one. It returns once the stream is in place (or its first dial failed), so mail delivered
// after the client has the answer is announced.
func (w *watcher) subscribe(ctx context.Context, req *sdk.SubscribeRequest) error {
	uri := req.Params.URI
	thread := ""
	if uri != InboxURI {
		id, ok := threadID(uri)
		if !ok {
			return sdk.ResourceNotFoundError(uri)
		}
		th, _, err := w.t.threadOf(ctx, id)
		if api.CodeOf(err) == api.CodeNotFound {
			return sdk.ResourceNotFoundError(uri)
		}
		if err != nil {
			return explain(err)
		}
		thread = th.Thread
	}
	w.mu.Lock()
	subs, known := w.sessions[req.Session]
	if !known {
		subs = map[string]string{}
		w.sessions[req.Session] = subs
		go func(ss *sdk.ServerSession) { // a session that ends drops its subscriptions
			ss.Wait()
			w.drop(ss, "")
		}(req.Session)
	}
	subs[uri] = thread
	var ready chan struct{}
	if w.stop == nil {
		sctx, stop := context.WithCancel(context.Background())
		w.stop = stop
		ready = make(chan struct{})
		go w.run(sctx, ready)
	}
	w.mu.Unlock()
	if ready != nil {
		select {
		case <-ready:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func (w *watcher) unsubscribe(_ context.Context, req *sdk.UnsubscribeRequest) error {
	w.drop(req.Session, req.Params.URI)
	return nil
}

// drop removes a session's subscription to uri ("" for all of them) and ends the event stream
// when no session is subscribed to anything.
func (w *watcher) drop(ss *sdk.ServerSession, uri string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if subs := w.sessions[ss]; subs != nil && uri != "" {
		delete(subs, uri)
	} else if uri == "" {
		delete(w.sessions, ss)
	}
	for _, subs := range w.sessions {
		if len(subs) > 0 {
			return
		}
	}
	if w.stop != nil {
		w.stop()
		w.stop = nil
	}
}

// errNoStream says the host reached has no event stream (no daemon runs).
var errNoStream = errors.New("no daemon, so no delivery events")

// stream opens the daemon's event stream for the agent's mailbox.
func (w *watcher) stream(ctx context.Context) (<-chan api.MailEvent, func() error, error) {
	c, err := w.t.connect(ctx)
	if err != nil {
		return nil, nil, err
	}
	es, ok := c.Host.(api.EventService)
	if !c.Daemon || !ok {
		c.Close()
		return nil, nil, errNoStream
	}
	ch, err := es.MailEvents(ctx, w.t.agent)
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	return ch, c.Close, nil
}

// run holds the event stream open until ctx ends, dialling it again when it breaks; ready is
// closed after the first dial.
func (w *watcher) run(ctx context.Context, ready chan struct{}) {
	wait := minRedial
	gap := false // events may have been missed: announce every subscribed resource
	for ctx.Err() == nil {
		ch, closeFn, err := w.stream(ctx)
		if ready != nil {
			close(ready)
			ready = nil
		}
		if err != nil {
			gap = true
			if w.logger != nil && ctx.Err() == nil {
				w.logger.Debug("mcp: delivery events", "err", err, "retry", wait)
			}
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			wait = min(2*wait, maxRedial)
			continue
		}
		wait = minRedial
		if gap {
			w.announce(ctx, func(string) bool { return true })
		}
		for ev := range ch {
			if ctx.Err() != nil {
				break // unsubscribed: an event read meanwhile is for nobody
			}
			if ev.Lost > 0 {
				w.announce(ctx, func(string) bool { return true })
				continue
			}
			w.announce(ctx, func(thread string) bool { return thread == "" || thread == ev.Thread })
		}
		closeFn()
		gap = true
	}
}

// announce sends notifications/resources/updated for each subscribed resource whose thread id
// ("" for the inbox) match accepts.
func (w *watcher) announce(ctx context.Context, match func(thread string) bool) {
	w.mu.Lock()
	uris := map[string]bool{}
	for _, subs := range w.sessions {
		for uri, thread := range subs {
			if match(thread) {
				uris[uri] = true
			}
		}
	}
	w.mu.Unlock()
	for uri := range uris {
		if err := w.srv.ResourceUpdated(ctx, &sdk.ResourceUpdatedNotificationParams{URI: uri}); err != nil && w.logger != nil {
			w.logger.Debug("mcp: resource update", "uri", uri, "err", fmt.Sprint(err))
		}
	}
}
