package mbx

import (
	"encoding/json"
	"fmt"
	"time"
)

// Enc-key advertisement timing.
const (
	EncAdTTL     = 30 * 24 * time.Hour // validity of a published ad
	EncAdMaxTTL  = 90 * 24 * time.Hour // the longest validity anyone accepts
	EncAdSkew    = 5 * time.Minute     // how far iat may be ahead of the checker's clock
	EncAdRefresh = 24 * time.Hour      // a publisher refreshes its ad at the relay this often
)

// EncAd is a v2 enc-key advertisement: host (with host key HostPubkey) asks senders to seal its
// mail to EncPub between IAT and Exp. It is signed by the host key over its canonical JSON. IAT and
// Exp are kept as written (any ISO-8601 spelling parses; the signature covers the text).
type EncAd struct {
	V          int    `json:"v"`
	Type       string `json:"type"`
	Host       string `json:"host"`
	HostPubkey string `json:"host_pubkey"`
	EncPub     string `json:"enc_pub"`
	IAT        string `json:"iat"`
	Exp        string `json:"exp"`
}

// EncAdV1 is the unexpiring v1 advertisement {v:1, host, enc_pub}, signed by the host key over its
// canonical JSON. It is still published for older senders and exchanged on the LAN, but a sender
// refuses it from a relay, which could replay it forever.
type EncAdV1 struct {
	V      int    `json:"v"`
	Host   string `json:"host"`
	EncPub string `json:"enc_pub"`
}

// EncAdPublish is the body of POST /v2/relay/enc-key.
type EncAdPublish struct {
	Ad  json.RawMessage `json:"ad"`
	Sig string          `json:"sig"`
}

// EncAdPublishV1 is the body of POST /v1/relay/enc-key; the host is the enrolment's.
type EncAdPublishV1 struct {
	EncPub string `json:"enc_pub"`
	Sig    string `json:"sig"`
}

// EncKeyAnswer is the relay's answer to GET /v2/relay/enc-key?pubkey= (and /v1 ?host=): the v1
// fields, and for a v2 publisher the signed v2 ad with its signature. Absent fields are nil.
type EncKeyAnswer struct {
	Host       string          `json:"host,omitempty"`
	HostPubkey string          `json:"host_pubkey,omitempty"`
	EncPub     *string         `json:"enc_pub,omitempty"`
	Sig        *string         `json:"sig,omitempty"`
	Ad         json.RawMessage `json:"ad,omitempty"`
	AdSig      *string         `json:"ad_sig,omitempty"`
}

// EncAdPeer is who an ad must come from: the peer's host key and, when not empty, its host name.
type EncAdPeer struct {
	Host       string
	HostPubkey string
}

// SignEncAdV2 builds and signs a v2 ad for host, valid from now for ttl (EncAdTTL when ttl is 0).
// It returns the ad, its JSON in field order (the "ad" of EncAdPublish) and the signature.
func SignEncAdV2(host string, k SigningKey, encPub string, now time.Time, ttl time.Duration) (EncAd, string, error) {
	if ttl == 0 {
		ttl = EncAdTTL
	}
	if !ValidPublicKey(encPub) {
		return EncAd{}, "", fmt.Errorf("sign enc-key ad: %w", ErrEncAdMalformed)
	}
	now = now.Truncate(time.Millisecond)
	ad := EncAd{V: 2, Type: "enc-ad", Host: host, HostPubkey: k.PublicKey(), EncPub: encPub, IAT: ISOTime(now), Exp: ISOTime(now.Add(ttl))}
	in, err := ad.SigningInput()
	if err != nil {
		return EncAd{}, "", fmt.Errorf("sign enc-key ad: %w", err)
	}
	return ad, k.Sign(in), nil
}

// SigningInput is the canonical JSON of the ad.
func (a EncAd) SigningInput() ([]byte, error) { return Canonical(a) }

// Publish is the POST /v2/relay/enc-key body for the ad and its signature.
func (a EncAd) Publish(sig string) (EncAdPublish, error) {
	raw, err := MarshalJSON(a)
	if err != nil {
		return EncAdPublish{}, err
	}
	return EncAdPublish{Ad: raw, Sig: sig}, nil
}

// IATTime and ExpTime parse the validity window (zero on a spelling that does not parse).
func (a EncAd) IATTime() time.Time { t, _ := parseTime(a.IAT); return t }

// ExpTime is the end of the ad's validity.
func (a EncAd) ExpTime() time.Time { t, _ := parseTime(a.Exp); return t }

// isKey32 is the original's enc key rule: 44 characters of padded standard base64 of 32 bytes.
// Go also refuses the non-canonical spellings (non-zero bits in the last character) that Node's
// lenient decoder lets through; no encoder produces them.
func isKey32(s string) bool { return ValidPublicKey(s) }

// CheckEncAd checks a v2 ad as received (its JSON) and its signature: it must be signed, well
// formed (v 2, type "enc-ad", string host ≤ 255, host_pubkey, iat and exp ≤ 40 characters, a 32-byte
// enc_pub), name the expected peer, verify with the expected host key over the record exactly as
// received (a field added after signing breaks the signature), and be valid at now: iat not more
// than EncAdSkew ahead, exp after now, a lifetime of at most EncAdMaxTTL. The errors are, in the
// order checked: ErrEncAdUnsigned, ErrEncAdMalformed, ErrEncAdWrongPeer, ErrEncAdSignature,
// ErrEncAdMalformed (times), ErrEncAdNotYetValid, ErrEncAdExpired, ErrEncAdLifetime.
//
// A relay checks a published ad with the enrolment as the peer; a sender with the pinned peer.
func CheckEncAd(ad []byte, sig string, expect EncAdPeer, now time.Time) (EncAd, error) {
	if sig == "" {
		return EncAd{}, ErrEncAdUnsigned
	}
	m, ok := parseObject(ad)
	if !ok {
		return EncAd{}, ErrEncAdMalformed
	}
	return checkEncAdTree(m, sig, expect, now)
}

func checkEncAdTree(m map[string]any, sig string, expect EncAdPeer, now time.Time) (EncAd, error) {
	a := EncAd{V: 2}
	var okT, okH, okP, okI, okE, okK bool
	a.Type, okT = getString(m, "type")
	a.Host, okH = getString(m, "host")
	a.HostPubkey, okP = getString(m, "host_pubkey")
	a.IAT, okI = getString(m, "iat")
	a.Exp, okE = getString(m, "exp")
	a.EncPub, okK = getString(m, "enc_pub")
	if !isNumber(m, "v", 2) || !okT || a.Type != "enc-ad" || !okH || !okP || !okI || !okE || !okK || !isKey32(a.EncPub) ||
		utf16Len(a.Host) > maxRecordHostLen || utf16Len(a.IAT) > maxRecordTimeLen || utf16Len(a.Exp) > maxRecordTimeLen {
		return EncAd{}, ErrEncAdMalformed
	}
	if a.HostPubkey != expect.HostPubkey || (expect.Host != "" && a.Host != expect.Host) {
		return EncAd{}, ErrEncAdWrongPeer
	}
	in, err := Canonical(m)
	if err != nil || !Verify(expect.HostPubkey, in, sig) {
		return EncAd{}, ErrEncAdSignature
	}
	iat, ok1 := parseTime(a.IAT)
	exp, ok2 := parseTime(a.Exp)
	if !ok1 || !ok2 {
		return EncAd{}, ErrEncAdMalformed
	}
	nowMS := now.UnixMilli()
	switch {
	case iat.UnixMilli() > nowMS+EncAdSkew.Milliseconds():
		return EncAd{}, ErrEncAdNotYetValid
	case exp.UnixMilli() <= nowMS:
		return EncAd{}, ErrEncAdExpired
	case exp.UnixMilli()-iat.UnixMilli() > EncAdMaxTTL.Milliseconds():
		return EncAd{}, ErrEncAdLifetime
	}
	return a, nil
}

// SignEncAdV1 builds and signs the v1 ad of host.
func SignEncAdV1(host string, k SigningKey, encPub string) (EncAdV1, string, error) {
	ad := EncAdV1{V: 1, Host: host, EncPub: encPub}
	in, err := Canonical(ad)
	if err != nil {
		return EncAdV1{}, "", fmt.Errorf("sign v1 enc-key ad: %w", err)
	}
	return ad, k.Sign(in), nil
}

// VerifyEncAdV1 reports whether hostPubkey signed the v1 ad {v:1, host, enc_pub}.
func VerifyEncAdV1(host, hostPubkey, encPub, sig string) bool {
	in, err := Canonical(EncAdV1{V: 1, Host: host, EncPub: encPub})
	return err == nil && Verify(hostPubkey, in, sig)
}

// RelayCheckEncAdV1 is the relay's check of POST /v1/relay/enc-key: the ad names the host of the
// publishing key's enrolment (ErrEncAdHostMismatch), carries a 32-byte enc key (ErrEncAdMalformed,
// a check the original does not make) and the enrolled key signed it (ErrEncAdV1Signature).
func RelayCheckEncAdV1(enrolled EncAdPeer, host, encPub, sig string) error {
	if host != enrolled.Host {
		return ErrEncAdHostMismatch
	}
	if !isKey32(encPub) {
		return ErrEncAdMalformed
	}
	if !VerifyEncAdV1(host, enrolled.HostPubkey, encPub, sig) {
		return ErrEncAdV1Signature
	}
	return nil
}

// EncFromRelayAnswer is the sender's verdict on a relay's enc-key answer for a paired peer: only a
// v2 ad that CheckEncAd accepts counts, and an enc_pub served beside it must be the ad's key. A v1
// answer is refused (ErrEncAdUnexpiring), as is an answer with neither (ErrEncAdUnsigned). It
// returns the enc key and the accepted ad.
func EncFromRelayAnswer(ans EncKeyAnswer, peer EncAdPeer, now time.Time) (string, EncAd, error) {
	if ans.Ad == nil {
		if ans.EncPub != nil && ans.Sig != nil {
			return "", EncAd{}, ErrEncAdUnexpiring
		}
		return "", EncAd{}, ErrEncAdUnsigned
	}
	sig := ""
	if ans.AdSig != nil {
		sig = *ans.AdSig
	}
	ad, err := CheckEncAd(ans.Ad, sig, peer, now)
	if err != nil {
		return "", EncAd{}, err
	}
	if ans.EncPub != nil && *ans.EncPub != ad.EncPub {
		return "", EncAd{}, ErrEncAdTampered
	}
	return ad.EncPub, ad, nil
}

// NewestEncAd applies the roll-back rule: a sender remembers the newest ad it accepted from each
// peer (stored, nil when none), and refuses an older ad that names another key, since a relay could
// otherwise serve a superseded (possibly compromised) key that has not expired yet. It returns the
// ad to remember: the candidate unless it is older than the stored one.
func NewestEncAd(stored *EncAd, candidate EncAd) (EncAd, error) {
	if stored == nil {
		return candidate, nil
	}
	if candidate.IATTime().Before(stored.IATTime()) {
		if candidate.EncPub != stored.EncPub {
			return *stored, ErrEncAdRolledBack
		}
		return *stored, nil
	}
	return candidate, nil
}
