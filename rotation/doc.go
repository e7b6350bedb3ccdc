// Package rotation is a host's key rotations: its own, and applying its peers'
// (docs/design.md: Host key rotation).
//
// Its own rotation starts with Prepare, on a home no daemon holds: new host and enc keys are
// written to host.key.next and enc.key.next, the rotation record signed by the old and the new
// key is stored with one progress entry per paired peer and one for the pinned relay (bucket
// "rotation", key "current", step "prepared"), then the keys are swapped: the old host key is
// appended to host.retired and the old enc key to the home's retired enc keys, and the enc key
// and the host key are replaced, each file atomically (step "swapped"). FinishSwap, which the
// host's Open calls, completes a swap a crash interrupted; every part of it is idempotent. Old
// keys are never deleted: the old enc key opens mail sealed to it before the peers learnt the
// new one, and the old host key signs the relay steps below.
//
// The network steps run on the open host (Rotation.RunOnce; the daemon runs Run until they are
// done, `id rotate` Continue once), each recorded when it is done:
//
//  1. relay notices: each paired peer gets a rotation notice (mbx.SealRotationNotice) pushed
//     under the old key, so a peer that reaches this host only through the relay learns the new
//     key in its queue's order, before any item signed by the new key; pending receipts signed
//     by the old key are pushed under it too;
//  2. relay rotate: POST /v2/relay/rotate moves the enrolment, the queue and the allowlists to
//     the new key and revokes the old one;
//  3. the receive position for the relay is reset to 0 (its queue was re-sequenced);
//  4. enrolment, enc-key ad and sender allowlist are published under the new key, and the
//     relay's confirmations are checked.
//
// Until step 3 is done Hold answers ErrRelayRotating, which the relay link returns for any other
// use. Independently, every peer with a LAN address gets POST /v1/rotate until it answers. A
// peer is done when its LAN answer or its relay notice is in (or it has neither way and its
// failure is recorded); the rotation is done when the relay steps and every peer are.
//
// A peer's record arrives over the LAN (LANApplier) or as a relay notice (Notice), and Apply
// checks it against the pinned key: when it moves the peer on, the host repins the new keys
// with the old ones retired (Host.Repin: its rows are rebound, quarantined items released).
// A replay changes nothing; anything that does not verify is refused (ErrRefused).
package rotation
