package api

import (
	"context"
	"fmt"
	"time"
)

// The mail routes of the control socket, served when the service also implements MailService:
//
//	GET  /v1/inbox/page    ?agent=&all=1&since=&limit=&peek=1 → InboxPage
//	GET  /v1/wait/new      ?agent=&timeout=30s&limit=    → InboxPage (new mail; empty on timeout)
//	GET  /v1/thread        ?agent=&id=                   → Thread
//	GET  /v1/search        ?agent=&q=&limit=             → SearchResult
//	POST /v1/reply         ReplyRequest                  → SendResult
//	GET  /v1/agents/known                                → []KnownAgent

// Page sizes of InboxPage, WaitNew and Search.
const (
	DefaultPage = 20
	MaxPage     = 500
	// MaxThread is how many messages of one thread Thread returns (the newest ones).
	MaxThread = 500
	// MaxQuery caps a search query, in bytes.
	MaxQuery = 1024
)

// MailService is the part of an agent's mailbox beyond Service: bounded inbox pages, waiting for
// new mail, threads, search and replies. host.Service implements it on the store (its mail from
// package host/mailstore), client.Client over the control socket.
type MailService interface {
	// InboxPage lists the newest Limit messages of an agent's mail after Since (unread, or all),
	// oldest first, and how many older ones it left out. The copies it shows move from
	// delivered to notified, unless Peek.
	InboxPage(ctx context.Context, req InboxRequest) (InboxPage, error)
	// WaitNew blocks until the agent has new mail (delivered and not yet shown by InboxPage,
	// Inbox, Wait or WaitNew) or the timeout passes. It returns the oldest Limit new messages,
	// oldest first, and how many new ones it left out; they move to notified, so each new
	// message is returned once. At the timeout the page is empty.
	WaitNew(ctx context.Context, req WaitRequest) (InboxPage, error)
	// Thread returns the messages of the thread of a message (or of a thread id), oldest first:
	// the agent's mail in it (received and sent), or all the host's with no agent.
	Thread(ctx context.Context, req ThreadRequest) (Thread, error)
	// Search finds messages whose subject or body holds every word of the query (case folded),
	// newest first: the agent's mail (received and sent), or all the host's with no agent.
	Search(ctx context.Context, req SearchRequest) (SearchResult, error)
	// Reply sends a message to the sender of a message the agent holds, in its thread.
	Reply(ctx context.Context, req ReplyRequest) (SendResult, error)
	// KnownAgents lists the agents of paired hosts this host knows of (from mail and receipts).
	KnownAgents(ctx context.Context) ([]KnownAgent, error)
}

// KnownAgent is an agent of a paired host that this host has had mail or a delivery receipt
// from, or sent mail to by name.
type KnownAgent struct {
	Host    string `json:"host"`
	Name    string `json:"name"`
	Address string `json:"address"` // name@host
}

// InboxRequest asks for one page of an agent's mail. Limit 0 is DefaultPage. Peek lists the
// page without moving any copy to notified (a view that is not shown to the agent, such as a
// resource a client reads on its own).
type InboxRequest struct {
	Agent string `json:"agent"`
	All   bool   `json:"all,omitempty"`
	Since string `json:"since,omitempty"` // a message id: only mail after it
	Limit int    `json:"limit,omitempty"`
	Peek  bool   `json:"peek,omitempty"`
}

// WaitRequest waits for an agent's new mail. Limit 0 is DefaultPage.
type WaitRequest struct {
	Agent   string        `json:"agent"`
	Timeout time.Duration `json:"timeout"`
	Limit   int           `json:"limit,omitempty"`
}

// InboxPage is a page of an agent's mail, oldest first. More counts the matching messages that
// the page left out.
type InboxPage struct {
	Messages []Message `json:"messages"`
	More     int       `json:"more"`
}

// ThreadRequest names a message (or a thread id) and, optionally, the agent whose view it is.
type ThreadRequest struct {
	Agent string `json:"agent,omitempty"`
	ID    string `json:"id"`
}

// Thread is the messages of one thread, oldest first. Earlier counts older messages left out
// beyond MaxThread. A message the agent sent and holds no copy of has state "sent".
type Thread struct {
	Thread   string    `json:"thread"`
	Messages []Message `json:"messages"`
	Earlier  int       `json:"earlier,omitempty"`
}

// SearchRequest is a search over an agent's mail ("" for all the host's). Limit 0 is
// DefaultPage.
type SearchRequest struct {
	Agent string `json:"agent,omitempty"`
	Query string `json:"query"`
	Limit int    `json:"limit,omitempty"`
}

// SearchResult is the matches, newest first; More says there are further matches.
type SearchResult struct {
	Query    string    `json:"query"`
	Messages []Message `json:"messages"`
	More     bool      `json:"more"`
}

// ReplyRequest answers message ID of agent From. Subject "" is "Re: " and the original's; Kind
// "" is reply. A reply to the agent's own message goes to that message's recipients.
type ReplyRequest struct {
	From    string `json:"from"`
	ID      string `json:"id"`
	Body    string `json:"body"`
	Subject string `json:"subject,omitempty"`
	Kind    string `json:"kind,omitempty"`
}

// PageSize checks a requested page size (of the mail pages and the outbox's): 0 is DefaultPage,
// 1 to MaxPage as asked; anything else is ErrInvalid.
func PageSize(n int) (int, error) {
	switch {
	case n == 0:
		return DefaultPage, nil
	case n < 0 || n > MaxPage:
		return 0, fmt.Errorf("%w: limit %d (1 to %d)", ErrInvalid, n, MaxPage)
	}
	return n, nil
}
