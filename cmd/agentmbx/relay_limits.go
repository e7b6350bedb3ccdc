package main

import (
	"github.com/spf13/cobra"

	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/relayserver"
)

// limitFlags are relay serve's bounds on what clients may make it hold (docs/design.md: Quotas
// and bounds).
type limitFlags struct {
	bodyBudget, maxItems, maxBytes int64
	responseBudget                 int64
	perClient, enrolPerDay         int
	pushesPerMinute                int
	maxSenderDedup                 int64
	maxParked                      int
}

func (l *limitFlags) add(cmd *cobra.Command) {
	f := cmd.Flags()
	f.Int64Var(&l.bodyBudget, "body-budget", relayserver.DefaultBodyBudget,
		"request body bytes in flight across the relay, counted as they arrive (an address holds at most a quarter); past it requests get 503")
	f.IntVar(&l.perClient, "max-per-client", relayserver.DefaultMaxPerClient,
		"requests with a body one client address (IPv6: one /64) may have in flight")
	f.Int64Var(&l.responseBudget, "response-budget", relayserver.DefaultResponseBudget,
		"pull answer bytes held in memory across the relay (answers are written a chunk at a time); past it pages end early or pulls get 503")
	f.Int64Var(&l.maxItems, "max-relay-items", 0,
		"items all queues may hold together, past which pushes get rejected:quota:relay (0: from the free disk space at start; -1: no limit)")
	f.Int64Var(&l.maxBytes, "max-relay-bytes", 0,
		"wire bytes all queues may hold together, with 160 for each dedup row (0: from the free disk space at start; -1: no limit)")
	f.Int64Var(&l.maxSenderDedup, "max-sender-dedup", relayserver.DefaultMaxSenderDedup,
		"dedup rows (tombstones included) one sender key may hold, past which its pushes get rejected:quota:sender_dedup (-1: no limit)")
	f.IntVar(&l.enrolPerDay, "new-enrolments-per-day", relayserver.DefaultNewEnrolmentsPerDay,
		"new host keys one client address may enrol a day (-1: no limit)")
	f.IntVar(&l.maxParked, "max-parked", 0,
		"long polls parked at once (each an open connection; one address holds at most 1/16); past it a poll gets an empty page with Retry-After: 10 (0: a quarter of the memory at 16 KiB a poll)")
	f.IntVar(&l.pushesPerMinute, "pushes-per-minute", mbx.PushesPerMinute,
		"push requests one sender key may make a minute, announced in the info so that hosts pace under it (-1: no limit)")
}

// apply sets the flags' values in o.
func (l *limitFlags) apply(o relayserver.Options) relayserver.Options {
	o.BodyBudget, o.MaxPerClient = l.bodyBudget, l.perClient
	o.ResponseBudget = l.responseBudget
	o.MaxRelayItems, o.MaxRelayBytes = l.maxItems, l.maxBytes
	o.NewEnrolmentsPerDay = l.enrolPerDay
	o.PushesPerMinute = l.pushesPerMinute
	o.MaxSenderDedup = l.maxSenderDedup
	o.MaxWaiting = l.maxParked
	return o
}
