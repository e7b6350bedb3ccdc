// Package inbox will be the receiver: relay items processed strictly in seq order, dedup by message
// id, a contiguous received_through committed in the same transaction as the last done item, and
// the epoch / rewind reset. Not built yet (issue: host ↔ relay); see the README.
package inbox
