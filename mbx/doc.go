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
//
// # Envelopes
//
// A message is an [Envelope] (v3). The sender builds it ([Build]), checks its shape ([Envelope.Check]),
// signs it with the host key, and seals it once per target host ([Envelope.Seal]): the body is
// encrypted to the target's X25519 key, and the signature covers the ciphertext, not the plaintext.
// The wire bytes of a sealed envelope are the exact JSON first produced; a pending send reuses them
// and never seals again, because a new seal makes new ciphertext. A receiver runs [Receive]: shape,
// then that the sender host and the from address belong to the peer it came from, then the
// signature, then opening with its current and retired enc keys. Each failure is typed so the
// receiver can answer rejected:<reason>.
//
// # Signed records
//
// Delivery receipts, enc-key ads, rotation records, sender allowlists, relay accept statements and
// expiry notices are each signed over their own canonical JSON. Receipts are parsed strictly
// (unknown fields refused); the other records are verified exactly as received, so a field added
// after signing fails as a bad signature. Every refusal is a sentinel error that wraps its family
// error (for example [ErrBadEncAd]), so callers can test either.
package mbx
