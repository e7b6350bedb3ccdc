package relayclient

import (
	"context"
	"fmt"
	"net/url"
	"time"

	"github.com/agentmbx/agentmbx/mbx"
)

// PublishEncAd signs a v2 enc-key ad for this host's enc key encPub, valid from now for ttl
// (mbx.EncAdTTL when 0), and publishes it (POST /v2/relay/enc-key). It returns the ad only when the
// relay confirmed it: a refusal is an error (ErrRefused, with the relay's reason), never assumed
// success. Republish well before Exp (mbx.EncAdRefresh) and after every key rotation.
func (c *Client) PublishEncAd(ctx context.Context, encPub string, ttl time.Duration) (mbx.EncAd, error) {
	ad, sig, err := mbx.SignEncAdV2(c.host, c.key, encPub, c.clock(), ttl)
	if err != nil {
		return mbx.EncAd{}, fmt.Errorf("relayclient: publish enc-key ad: %w: %w", ErrInvalid, err)
	}
	pub, err := ad.Publish(sig)
	if err != nil {
		return mbx.EncAd{}, fmt.Errorf("relayclient: publish enc-key ad: %w", err)
	}
	body, err := mbx.MarshalJSON(pub)
	if err != nil {
		return mbx.EncAd{}, fmt.Errorf("relayclient: publish enc-key ad: %w", err)
	}
	a, err := c.do(ctx, request{op: "publish enc-key ad", method: "POST", path: "/v2/relay/enc-key", body: body, hop: true, retry: true, max: maxSmallAnswer})
	if err != nil {
		return mbx.EncAd{}, err
	}
	if err := expectOK("publish enc-key ad", a); err != nil {
		return mbx.EncAd{}, err
	}
	return ad, nil
}

// PublishEncAdV1 publishes the unexpiring v1 ad {v:1, host, enc_pub} for senders older than the
// v2 ads (POST /v1/relay/enc-key). Checked like PublishEncAd.
func (c *Client) PublishEncAdV1(ctx context.Context, encPub string) error {
	return publishEncAdV1(ctx, c.do, c.host, c.key, encPub)
}

// publishEncAdV1 is PublishEncAdV1 over do (a v2 or a v1 client's).
func publishEncAdV1(ctx context.Context, do func(context.Context, request) (answer, error), host string, key mbx.SigningKey, encPub string) error {
	if !mbx.ValidPublicKey(encPub) {
		return fmt.Errorf("relayclient: publish v1 enc-key ad: %w: enc key is not a 32-byte key", ErrInvalid)
	}
	_, sig, err := mbx.SignEncAdV1(host, key, encPub)
	if err != nil {
		return fmt.Errorf("relayclient: publish v1 enc-key ad: %w: %w", ErrInvalid, err)
	}
	body, err := mbx.MarshalJSON(mbx.EncAdPublishV1{EncPub: encPub, Sig: sig})
	if err != nil {
		return fmt.Errorf("relayclient: publish v1 enc-key ad: %w", err)
	}
	a, err := do(ctx, request{op: "publish v1 enc-key ad", method: "POST", path: "/v1/relay/enc-key", body: body, hop: true, max: maxSmallAnswer})
	if err != nil {
		return err
	}
	return expectOK("publish v1 enc-key ad", a)
}

// FetchEncAd asks the relay for a peer's enc key (GET /v2/relay/enc-key?pubkey=) and applies every
// refusal rule: only a v2 ad signed by the peer's pinned key, for that peer (host name too, when
// peer.Host is set), valid now, not tampered with, counts (mbx.EncFromRelayAnswer); and an ad older
// than newest (the newest this host accepted from that peer, nil when none) that names another key
// is refused as rolled back (mbx.NewestEncAd). It returns the enc key to seal to and the ad to
// remember as the newest. A refused answer wraps ErrProtocol and the mbx refusal (mbx.ErrBadEncAd);
// a peer without an ad at the relay is ErrNotFound. Callers use this only when no LAN-pinned enc
// key exists: a pinned LAN key wins.
func (c *Client) FetchEncAd(ctx context.Context, peer mbx.EncAdPeer, newest *mbx.EncAd) (string, mbx.EncAd, error) {
	if !mbx.ValidPublicKey(peer.HostPubkey) {
		return "", mbx.EncAd{}, fmt.Errorf("relayclient: fetch enc-key ad: %w: peer key is not a host key", ErrInvalid)
	}
	op := "fetch enc-key ad of " + mbx.Fingerprint(peer.HostPubkey)
	a, err := c.do(ctx, request{op: op, method: "GET", path: "/v2/relay/enc-key?pubkey=" + url.QueryEscape(peer.HostPubkey),
		hop: true, retry: true, max: maxSmallAnswer})
	if err != nil {
		return "", mbx.EncAd{}, err
	}
	var ans mbx.EncKeyAnswer
	if err := decode(op, a, &ans); err != nil {
		return "", mbx.EncAd{}, err
	}
	encPub, ad, err := mbx.EncFromRelayAnswer(ans, peer, c.clock())
	if err != nil {
		return "", mbx.EncAd{}, fmt.Errorf("relayclient: %s: %w: %w", op, ErrProtocol, err)
	}
	keep, err := mbx.NewestEncAd(newest, ad)
	if err != nil {
		return "", mbx.EncAd{}, fmt.Errorf("relayclient: %s: %w: %w", op, ErrProtocol, err)
	}
	if keep.EncPub != encPub {
		// The relay served an older ad naming the same key: still valid, but the newest known ad
		// says what to seal to and what to remember.
		encPub = keep.EncPub
	}
	return encPub, keep, nil
}

// PublishSenders signs and publishes this host's sender allowlist (POST /v2/relay/senders): the
// keys of its paired peers, at most mbx.MaxSenders. Once published, the relay refuses pushes to
// this host from other keys. The relay keeps the list with the latest iat; a refusal (a newer
// list already stored, an iat ahead of the relay's clock) is an error wrapping ErrRefused.
func (c *Client) PublishSenders(ctx context.Context, senders []string) (mbx.SenderList, error) {
	l, sig, err := mbx.SignSenderList(c.key, senders, c.clock())
	if err != nil {
		return mbx.SenderList{}, fmt.Errorf("relayclient: publish senders: %w: %w", ErrInvalid, err)
	}
	pub, err := l.Publish(sig)
	if err != nil {
		return mbx.SenderList{}, fmt.Errorf("relayclient: publish senders: %w", err)
	}
	body, err := mbx.MarshalJSON(pub)
	if err != nil {
		return mbx.SenderList{}, fmt.Errorf("relayclient: publish senders: %w", err)
	}
	a, err := c.do(ctx, request{op: "publish senders", method: "POST", path: "/v2/relay/senders", body: body, hop: true, retry: true, max: maxSmallAnswer})
	if err != nil {
		return mbx.SenderList{}, err
	}
	if err := expectOK("publish senders", a); err != nil {
		return mbx.SenderList{}, err
	}
	return l, nil
}

// Rotate tells the relay about this host's key rotation (POST /v2/relay/rotate, no hop: both keys
// signed the record). The relay moves the enrolment, the queue (re-sequenced) and the allowlists
// to the new key and revokes the old one. Afterwards use a Client with the new key, reset the
// receive position for this relay to 0 (checkpoint.ResetRotated) and republish the enc-key ad.
func (c *Client) Rotate(ctx context.Context, rot mbx.SignedRotation) (mbx.RotateResponse, error) {
	raw, err := mbx.MarshalJSON(rot)
	if err != nil {
		return mbx.RotateResponse{}, fmt.Errorf("relayclient: rotate: %w", err)
	}
	if _, err := mbx.CheckRotation(raw, rot.Rec.OldPub); err != nil {
		return mbx.RotateResponse{}, fmt.Errorf("relayclient: rotate: %w: %w", ErrInvalid, err)
	}
	body, err := mbx.MarshalJSON(mbx.RotateRequest{Rotation: raw})
	if err != nil {
		return mbx.RotateResponse{}, fmt.Errorf("relayclient: rotate: %w", err)
	}
	a, err := c.do(ctx, request{op: "rotate", method: "POST", path: "/v2/relay/rotate", body: body, max: maxSmallAnswer})
	if err != nil {
		return mbx.RotateResponse{}, err
	}
	var res mbx.RotateResponse
	if err := decode("rotate", a, &res); err != nil {
		return mbx.RotateResponse{}, err
	}
	if res.Moved < 0 {
		return mbx.RotateResponse{}, fmt.Errorf("relayclient: rotate: %w: negative moved count", ErrProtocol)
	}
	return res, nil
}
