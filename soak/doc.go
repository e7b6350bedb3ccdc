// Package soak is the real-process soak of agentmbx: one relay and three hosts run as child
// processes of the agentmbx binary, all pairwise paired (two of them relay-only), one of them
// reaching the relay through a fault-injecting proxy (Proxy). Seeded random traffic (direct,
// broadcast and role mail) runs while the relay and every host daemon are SIGKILLed and
// restarted and the relay is restored from a backup; an oracle (Tally) then checks every
// message is in every intended mailbox exactly once and every outbox row is settled.
//
// The run itself is TestSoak, behind the soak build tag (make soak); this package's untagged
// tests cover the proxy, the addressing model and the oracle.
package soak
