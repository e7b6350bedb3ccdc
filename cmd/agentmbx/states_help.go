package main

import (
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/cobra"
)

// inboxStates explains the states of a mailbox copy; the mail commands' help ends with it.
const inboxStates = `
Mail states (a copy only moves forward; the sender's ` + "`agentmbx sent ID`" + ` sees each):
  delivered  in the agent's mailbox, not shown to it yet
  notified   listed to the agent once (by inbox, wait or the MCP tools); still unread
  read       opened with ` + "`agentmbx read`" + `
  acked      acknowledged with ` + "`agentmbx ack`" + ` (done; the sender is told)
inbox shows delivered and notified mail (unread); --all shows every state.`

// explainStates appends inboxStates to the help of the commands that show or move mail states.
func explainStates(root *cobra.Command) {
	for _, c := range root.Commands() {
		switch c.Name() {
		case "inbox", "read", "ack":
			if c.Long == "" {
				c.Long = c.Short
			}
			c.Long += "\n" + inboxStates
		}
	}
}

// receivePosition says in words how far this host has pulled from the relay: the relay numbers
// each host's items with their acceptance time in Unix milliseconds (or the next number when
// that is not larger), so a seq is large, not dense, and reads as a time.
func receivePosition(seq int64) string {
	s := "received everything through seq " + strconv.FormatInt(seq, 10)
	if seq == 0 {
		return s + " (nothing pulled yet)"
	}
	if seq > 1e12 { // a millisecond timestamp (after 2001)
		at := time.UnixMilli(seq).UTC().Format(time.RFC3339)
		return s + fmt.Sprintf(" (the relay's seqs are the items' acceptance times in Unix ms: mail the relay accepted until about %s)", at)
	}
	return s + " (the relay's position counter for this host)"
}
