// Package quarantine will keep relay items the receiver rejected (relay, epoch, seq, item_id,
// sender, reason, wire bytes, time) so that nothing is ever dropped silently, and retry those
// rejected only because their sender was not yet paired. Not built yet; see the README.
package quarantine
