// Package sim is the deterministic simulation of agentmbx: three hosts and the relay in one
// process, on a simulated clock and a simulated network, driven by one seeded schedule.
//
// What runs is the real code: host.Host (its outbox, receiver, quarantine, LAN handler and relay
// link) over its bbolt store, and relayserver.Server over sqlitestore. What is simulated is what
// sits between them: the clock (testkit.Clock), every byte of randomness (seeded per node and
// incarnation), and the network, an http.RoundTripper that parks each request until the schedule
// delivers it to the server's handler, drops it, delivers it twice or leaves it waiting while
// other requests pass it; an answer is then delivered or lost (the server committed). Nodes crash
// at any event: a crashed node's memory is gone, its store keeps what it committed, and it starts
// again from its files. The daemons' loops are replaced by their steps (host.Steps: Outbox,
// Sweep, and the relay link's Keep and PullStep), each run as a task on its own goroutine;
// only one task runs at a time, and it runs until it parks on the network or ends, so the run is
// a function of the seed.
//
// After the faults, the network is made reliable and every host steps until its outbox settles;
// then the soak's oracle checks the mailboxes (every message exactly once where it was meant),
// the outbox rows (done, or ended with an alert naming them), the quarantine (empty: every host
// is paired with every other) and the relay's seqs, watched on the wire (per target they only
// grow; an item keeps its seq; a page is in seq order).
//
// go test ./sim runs SIM_SEEDS seeds (default 200, 10 under -race) from SIM_SEED_BASE; SIM_SEED=N
// replays one. Every third seed runs against a relay that announces max_batch 2, so that a host's
// send takes several pushes whose answers can straddle a crash or a restore (BatchFor).
package sim
