// Package mailstore is the agents' mail on a host: the messages local agents hold, each agent's
// copies and their states, and the indexes that search, threads, inbox pages and the roster of
// known remote agents read. It lives in the host's bbolt file, beside the outbox and the receive
// checkpoint, and writes inside the caller's transaction (DeliverTx, ResendReceiptsTx), so that
// receiving a message stores it, its copies, their receipts and the receive checkpoint in one
// commit.
//
// A Store serves the mail half of the control socket: api.MailService and the Inbox, Read, Ack
// and Wait of api.Service. What it needs of its host (registering an agent on first use,
// signing and queueing a delivery receipt, the sent records, the peers, Send for replies) it
// asks through the Host interface. Its errors are api's (api.ErrInvalid for bad input, changing
// nothing; api.ErrNotFound, api.ErrReserved, api.ErrCorrupt, api.ErrClosed).
//
// # Copies and states
//
// A copy moves forward only: delivered, notified (an agent was shown it), read, acked. A copy of
// mail from another host queues a signed delivery receipt for that host at every move, in the
// transaction of the move. Listing mail (Inbox, InboxPage, Wait, WaitNew) moves the delivered
// copies it shows to notified; Thread and Search move nothing.
//
// # Layout
//
// Buckets lists the store's buckets: messages (id → Message JSON), mbox (agent ‖ id → Copy JSON),
// unread (agent ‖ id: the copies delivered or notified), deliveries (agent ‖ id → be64: how many
// times the copy was put in the mailbox, 1 unless a repeat got past the dedup) and the indexes
// (IndexBuckets): the words of each message, its thread, the mail each agent holds or sent, the
// copies still in state delivered, and the agents of other hosts this host has heard of. Keys are k1 ‖ 0x00 ‖ k2
// (names and ids hold no NUL); index values are empty. Nothing is pruned: messages are not
// deleted.
//
// A search intersects the sorted id lists of its words (and of the agent's mail) from the newest
// id down, each list seeking to the current candidate, so it reads about as many keys as the
// shortest list holds and stops after a page.
//
// Wait and WaitNew take the notifier's channel before they look at the store, and DeliverTx
// closes it when its transaction commits, so a delivery in between still wakes them. The same
// commit hands one api.MailEvent per new copy to the subscribers of MailEvents (the daemon's
// event stream, GET /v1/events), without waiting for a slow one: it loses events and is told how
// many.
package mailstore
