package api

import "context"

// The notice route of the control socket, served when the service also implements
// NoticeService:
//
//	POST /v1/notices  NoticeRequest → InboxPage

// NoticeService announces an agent's new mail once, for the hooks of agent runtimes (`agentmbx
// notify`). host.Service implements it on its mail store, client.Client over the control socket.
type NoticeService interface {
	// Notices returns the agent's new mail (delivered, not yet shown or read) that no earlier
	// call announced, and marks it announced: the newest Limit messages, oldest first, and how
	// many others it announced by count (More). It moves no copy's state. Limit 0 is
	// DefaultPage.
	Notices(ctx context.Context, req NoticeRequest) (InboxPage, error)
}

// NoticeRequest asks for an agent's unannounced new mail.
type NoticeRequest struct {
	Agent string `json:"agent"`
	Limit int    `json:"limit,omitempty"`
}
