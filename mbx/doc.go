// Package mbx holds the wire formats and rules of AgentMBX 0.5.x, so that a Go host or relay
// interoperates byte for byte with the TypeScript implementation. It is pure: no I/O, no logging,
// no storage. Time and randomness come from the caller.
//
// # Keys
//
// A host has an Ed25519 host key ([SigningKey]) that signs envelopes, hops and records, and a
// separate static X25519 key ([EncKey]) that peers seal bodies to. On the wire a public key is the
// standard base64 (with padding) of its 32 raw bytes; its printable identity is its [Fingerprint].
// Key values print only their fingerprint, so they are safe to log.
//
// # Canonical JSON
//
// Every signature covers [Canonical] JSON: keys sorted by UTF-16 code units, JavaScript string
// escaping (not Go's: '<', '>' and '&' stay raw) and JavaScript number printing. Verifiers
// canonicalize the record as received, so a field added after signing breaks the signature.
//
// # Hops
//
// Requests between hosts on a LAN and requests to a relay are authenticated by signed hops, two
// schemes with their own inputs ([LANHopInput], [RelayHopInput]). Both allow five minutes of clock
// skew either way. The relay scheme covers the query string of /v2 paths, so a pull cursor cannot
// be altered in flight.
package mbx
