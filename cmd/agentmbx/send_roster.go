package main

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/agentmbx/agentmbx/mbx"
)

// rosterWarnings names the name@host recipients that host's last known roster does not hold (the
// agents this host had mail or receipts from there, or sent to by name). A peer that does not
// know the name creates it on arrival, so a typo would pass silently. Hosts with no known roster
// get no warning; nothing here stops the send.
func rosterWarnings(ctx context.Context, c *conn, addrs []string) []string {
	ms, err := mailOf(c)
	if err != nil {
		return nil
	}
	known, err := ms.KnownAgents(ctx)
	if err != nil {
		return nil
	}
	roster := map[string][]string{}
	for _, k := range known {
		roster[k.Host] = append(roster[k.Host], k.Name)
	}
	var out []string
	for _, s := range addrs {
		a, err := mbx.ParseAddress(s)
		if err != nil || a.Kind != mbx.AddrAgent {
			continue
		}
		names := roster[a.Host]
		if len(names) == 0 || slices.Contains(names, a.Name) {
			continue
		}
		out = append(out, fmt.Sprintf("warning: %s: %s has no agent %q in its last known roster (%s); sent anyway, "+
			"and %s creates that mailbox when the mail arrives: check the spelling",
			s, a.Host, a.Name, strings.Join(names, ", "), a.Host))
	}
	return out
}
