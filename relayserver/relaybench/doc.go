// Package relaybench is the load generator behind `agentmbx relay bench`: it runs a relay in
// process on a SQLite store in a directory of the operator's choosing, serves it over real HTTP on
// loopback, enrols synthetic hosts and pushes signed items at it from concurrent pushers, each
// push answered only after its fsynced commit, as in production. It measures the same load with
// group commit and with one commit per item, the directory's raw fsync rate and the Ed25519
// costs, so an operator can size a relay on their own disk and see how far it runs from the
// crypto floor.
package relaybench
