// Package soak is the real-process soak of agentmbx: one relay and three hosts run as child
// processes of the agentmbx binary, all pairwise paired (two of them relay-only), one of them
// reaching the relay through a fault-injecting proxy (Proxy). Seeded random traffic (direct,
// broadcast and role mail) runs while the relay and every host daemon are SIGKILLed and
// restarted and the relay is restored from a backup, and agents read and ack their mail; the
// oracle (package internal/oracle) then checks every message was delivered to every intended
// mailbox exactly once and no copy went back to an earlier state, every outbox row is settled,
// and the planned faults happened.
//
// The run itself is TestSoak, behind the soak build tag (make soak), and TestSoakOracleSelfTest
// (make soak-selftest) shows its oracle failing when the daemons skip their dedup; this package's
// untagged tests cover the proxy, the addressing model and the row checks.
package soak
