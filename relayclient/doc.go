// Package relayclient is the host's client of a relay's v2 API (and, as a fallback, of a v1-only relay) (docs/design.md: Relay identity and
// pinning, Push and acceptance, Receive checkpoint and ack, Enrolment and publications): discovery
// and key pinning, enrolment, enc-key ads, the sender allowlist, key rotation, push with
// accept-statement verification, pull and ack.
//
// # Pinning
//
// A relay is untrusted for content but has an identity: its Ed25519 relay key. The owner pins it
// once (`agentmbx relay set URL [--key FINGERPRINT]`): Discover fetches the relay's info without
// a hop, and PinInfo turns it into a Pin, checking the fingerprint when one was given (trust on
// first use otherwise). A Client is made for a Pin; whenever the relay serves another key — in
// its info, or as the self-consistent signer of accept statements — the Client stops: that call
// and every later one fail with ErrRelayKeyChanged, until the owner pins the new key.
//
// # The protocol, step by step
//
//  1. Info (GET /v2/relay/info, signed): relay key, epoch, limits, and this host's queue head when
//     the relay knows the host key. No You block, or ErrNotEnrolled on any call: Enrol.
//  2. Enrol: POST /v1/relay/challenge, then POST /v1/relay/enrol with the challenge signed by the
//     host key. Idempotent; repeat after a relay reset or restore.
//  3. PublishEncAd (v2, expiring) so senders can seal to this host, PublishSenders (the paired
//     peers' keys) so the relay refuses strangers. Both are checked: a refusal is an error.
//  4. Push (POST /v2/relay/items): one TargetResult per item and target. Only a statement signed by
//     the pinned relay key, naming this sender, the item id, the target and the SHA-256 of the
//     exact bytes sent makes a target Accepted; anything else leaves the outbox row pending.
//  5. Pull (GET /v2/relay/items?after=&limit=&epoch=&wait=): the query is covered by the hop, so
//     the cursor cannot be altered in flight. A 409 is an *EpochError carrying the new epoch.
//  6. Ack (POST /v2/relay/ack) through the committed received_through, never beyond. BAD_ACK is
//     ErrRewound: the relay's store went back in time; reset to 0 like an epoch change.
//
// # Errors
//
// Every error wraps one class: ErrTransport (no answer: the request may or may not have taken
// effect), ErrStatus (an error status, a *StatusError with the relay's words; 4xx also wraps
// ErrRefused), ErrProtocol (an answer that breaks the protocol, including a served record that
// fails its checks) or ErrInvalid (bad input, nothing sent). Specific errors (ErrEpochChanged,
// ErrRewound, ErrNotEnrolled, ErrRateLimited, …) are wrapped beside the class.
//
// # Retries
//
// Idempotent requests (info, challenge, enrol, the publications, a pull without a wait, ack, and
// push, idempotent by the relay's dedup) go through github.com/hashicorp/go-retryablehttp: a
// transport failure or a 500/502/503/504 is retried up to Options.RetryMax times (2), with a
// jittered wait or a short Retry-After, each retry re-signing the hop and fitting inside the
// request's timeout. A 429, any other 4xx, a long Retry-After, a long poll and a rotation
// surface at once (retry.go); beyond that, Retryable says where a later retry can help.
//
// # Caveats
//
// Client speaks v2. A relay that answers 404 to its info speaks v1 only (ErrV1Only); Negotiate
// tells the two apart and V1 (v1.go) is the fallback client, with what a v1 relay cannot promise
// written down there: no accept statement, no epoch, no receipts, routing by name. Requests are not followed across redirects: a signed hop is
// for one URL.
package relayclient
