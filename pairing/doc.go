// Package pairing runs LAN pairing: two hosts on one network pin each other with a one-time
// token and a 6-digit code. A Service implements api.PairingService for one host.
//
// The inviting host (`agentmbx pair`) makes a token and waits; the joining host (`agentmbx
// join ADDR TOKEN`) talks to the inviter's LAN server under /v2/pair/. Both derive a key from the token
// (mbx.PairTokenKey: scrypt; the inviter keeps only this key, never the token), prove knowledge
// of it with MACs over the join transcript (mbx.JoinTranscript, mbx.PairMAC), exchange signed
// enc-key ads (so each enc key is vouched for by a host key, itself vouched for by the MACs), and
// show the code mbx.PairingCode(a, b). A side pins the other only when its own user confirmed
// the code and the other side's confirmation arrived, MAC'ed with the token key: the inviter
// waits for the joiner's confirmation, the joiner waits for the inviter's answer.
//
// The exchange, with a the inviter and b the joiner (K = PairTokenKey(token), T = the join
// transcript of a and b, every message JSON):
//
//	b → a  GET  /v2/pair/hello
//	a → b  200 {v:1, proto, host, host_pubkey, owner_pubkey:null, nonce:nA, expires_at}
//	b → a  POST /v2/pair/join {v:1, a_nonce:nA, b:{host, host_pubkey, owner_pubkey:null, nonce:nB,
//	       addr}, mac_join: PairMAC(K, "join", T), enc_ad:{ad: b's v2 enc-key ad, sig}}
//	a → b  200 {mac_accept: PairMAC(K, "accept", T), enc_ad:{ad: a's v2 enc-key ad, sig}}
//	       (both show PairingCode(a, b); each user compares and confirms or declines)
//	b → a  POST /v2/pair/confirm {v:1, a_nonce, b_nonce, accept, mac: ConfirmMAC(K, "confirm-b", T, accept)}
//	a → b  200 {state:"waiting"}   (a's user has not decided within 20 s; b sends it again)
//	     | 200 {state:"done", accept:true, mac: ConfirmMAC(K, "confirm-a", T, true)}     (a pinned b)
//	     | 200 {state:"declined", accept:false, mac: ConfirmMAC(K, "confirm-a", T, false)}
//
// ConfirmMAC is mbx.PairConfirmMAC (this implementation's addition; 0.5.x had no confirmation
// message); the messages are mbx's Pair* types. Errors are answered as {error, code}, code one
// of no_pairing (404), expired, burned, declined, cancelled (410), bad_token (403), state,
// conflict (409), bad_request (400): api.PairReason of the api.ErrPair* errors.
//
// The token is 12 Crockford base32 characters (60 bits) printed as XXXX-XXXX-XXXX and valid for
// DefaultTTL. The inviter answers one join per token; MaxAttempts wrong MACs burn it; a
// join for another session's nonce is refused, so a replayed join pins nothing. After a join,
// both users have ConfirmWindow to confirm. One session (of either role) at a time per host.
package pairing
