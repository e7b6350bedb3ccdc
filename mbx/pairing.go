package mbx

import (
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"golang.org/x/crypto/scrypt"
)

// PairParty is one side of a pairing: its host name and key, its owner key ("" when it has none)
// and the nonce it contributed.
type PairParty struct {
	Host        string
	HostPubkey  string
	OwnerPubkey string
	Nonce       string
}

const pairCodePrefix = "mbx-pair-v2\n"

// PairProto names the token pairing protocol: the hello's proto, the transcript's proto, and the
// salt of the token key and of every MAC key.
const PairProto = "agentmbx-pair-token-v1"

func (p PairParty) codeLine() string {
	owner := p.OwnerPubkey
	if owner == "" {
		owner = "-"
	}
	return p.Host + "|" + p.HostPubkey + "|" + owner + "|" + p.Nonce
}

// PairingPreimage is the text whose hash gives the pairing code: "mbx-pair-v2\n" and the two
// parties as host|host_pubkey|owner_pubkey-or-"-"|nonce, sorted (as JavaScript sorts strings) and
// joined with "\n". It does not depend on which party is a.
func PairingPreimage(a, b PairParty) string {
	lines := []string{a.codeLine(), b.codeLine()}
	slices.SortFunc(lines, compareUTF16)
	return pairCodePrefix + strings.Join(lines, "\n")
}

// PairingCode is the 6-digit code both owners compare: the first four bytes of SHA-256 of the
// preimage as a big-endian number, modulo 1,000,000, zero-padded.
func PairingCode(a, b PairParty) string {
	sum := sha256.Sum256([]byte(PairingPreimage(a, b)))
	return fmt.Sprintf("%06d", binary.BigEndian.Uint32(sum[:4])%1_000_000)
}

var pairTokenRE = regexp.MustCompile(`^[0-9A-HJKMNP-TV-Z]{12}$`)

// NormalizePairToken reads a pairing token leniently: any case, with or without dashes and spaces,
// with the Crockford look-alikes I and L read as 1 and O as 0. The result is 12 Crockford base32
// characters, or ErrPairToken.
func NormalizePairToken(t string) (string, error) {
	s := strings.ToUpper(t)
	s = strings.Map(func(r rune) rune {
		if r == '-' || pairTokenSpace(r) {
			return -1
		}
		switch r {
		case 'I', 'L':
			return '1'
		case 'O':
			return '0'
		}
		return r
	}, s)
	if !pairTokenRE.MatchString(s) {
		return "", ErrPairToken
	}
	return s, nil
}

// pairTokenSpace reports whether r is in JavaScript's \s class.
func pairTokenSpace(r rune) bool {
	switch r {
	case '\t', '\n', '\v', '\f', '\r', ' ', 0xa0, 0x1680, 0x2028, 0x2029, 0x202f, 0x205f, 0x3000, 0xfeff:
		return true
	}
	return r >= 0x2000 && r <= 0x200a
}

// PairTokenKey derives the pairing key from a token: hex of scrypt(normalized token, salt
// "agentmbx-pair-token-v1", N=32768, r=8, p=1, 32 bytes). A daemon keeps only this, never the
// token. It takes about a tenth of a second and 32 MiB.
func PairTokenKey(token string) (string, error) {
	n, err := NormalizePairToken(token)
	if err != nil {
		return "", err
	}
	k, err := scrypt.Key([]byte(n), []byte(PairProto), 1<<15, 8, 1, 32)
	if err != nil {
		return "", fmt.Errorf("pair token key: %w", err)
	}
	return hex.EncodeToString(k), nil
}

// JoinTranscript is what both MACs of a token pairing cover: canonical({proto, a:{host,
// host_pubkey, owner_pubkey (null when none), nonce}, b:{the same, addr}}), where b is the joining
// host and addr the address it asks a to use.
func JoinTranscript(a, b PairParty, addr string) ([]byte, error) {
	pick := func(p PairParty) map[string]any {
		var owner any
		if p.OwnerPubkey != "" {
			owner = p.OwnerPubkey
		}
		return map[string]any{"host": p.Host, "host_pubkey": p.HostPubkey, "owner_pubkey": owner, "nonce": p.Nonce}
	}
	bm := pick(b)
	bm["addr"] = addr
	return Canonical(map[string]any{"proto": PairProto, "a": pick(a), "b": bm})
}

// Pairing MAC labels: "join" is sent by the joining host, "accept" by the host that accepts.
const (
	PairMACJoin   = "join"
	PairMACAccept = "accept"
)

// PairMAC is the MAC of a token pairing step: base64url (no padding) of HMAC-SHA256 over
// label + "\n" + transcript, keyed by HKDF-SHA256(ikm = the token key's bytes, salt PairProto,
// info "mac:" + label, 32 bytes).
func PairMAC(tokenKeyHex, label string, transcript []byte) (string, error) {
	if label != PairMACJoin && label != PairMACAccept {
		return "", ErrPairMACLabel
	}
	return pairMAC(tokenKeyHex, label, transcript, "")
}

// Confirmation MAC labels: "confirm-b" is sent by the joining host, "confirm-a" by the inviter.
const (
	PairMACConfirmJoiner  = "confirm-b"
	PairMACConfirmInviter = "confirm-a"
)

// PairConfirmMAC is the MAC of a confirmation, this implementation's addition to the 0.5.x
// exchange: PairMAC's construction under a confirm label, over label + "\n" + transcript + "\n"
// + "accept" or "decline".
func PairConfirmMAC(tokenKeyHex, label string, transcript []byte, accept bool) (string, error) {
	if label != PairMACConfirmJoiner && label != PairMACConfirmInviter {
		return "", ErrPairMACLabel
	}
	answer := "\ndecline"
	if accept {
		answer = "\naccept"
	}
	return pairMAC(tokenKeyHex, label, transcript, answer)
}

func pairMAC(tokenKeyHex, label string, transcript []byte, suffix string) (string, error) {
	ikm, err := hex.DecodeString(tokenKeyHex)
	if err != nil || len(ikm) != 32 {
		return "", ErrPairTokenKey
	}
	k, err := hkdf.Key(sha256.New, ikm, []byte(PairProto), "mac:"+label, 32)
	if err != nil {
		return "", fmt.Errorf("pair mac: %w", err)
	}
	h := hmac.New(sha256.New, k)
	h.Write([]byte(label + "\n"))
	h.Write(transcript)
	h.Write([]byte(suffix))
	return base64.RawURLEncoding.EncodeToString(h.Sum(nil)), nil
}

// PairMACEqual compares two MACs in constant time.
func PairMACEqual(a, b string) bool { return hmac.Equal([]byte(a), []byte(b)) }

// The messages of the LAN pairing exchange (package pairing runs it): the inviter's hello, the
// joiner's join with its answer, and the joiner's confirmation with the inviter's answer.
type (
	// PairHello is the answer to GET /v2/pair/hello.
	PairHello struct {
		V           int     `json:"v"`
		Proto       string  `json:"proto"`
		Host        string  `json:"host"`
		HostPubkey  string  `json:"host_pubkey"`
		OwnerPubkey *string `json:"owner_pubkey"`
		Nonce       string  `json:"nonce"`
		ExpiresAt   string  `json:"expires_at"`
	}
	// PairPartyWire is the joiner's party in a join, with the address it asks to be pinned at.
	PairPartyWire struct {
		Host        string  `json:"host"`
		HostPubkey  string  `json:"host_pubkey"`
		OwnerPubkey *string `json:"owner_pubkey"`
		Nonce       string  `json:"nonce"`
		Addr        *string `json:"addr,omitempty"`
	}
	// PairJoinRequest is the body of POST /v2/pair/join.
	PairJoinRequest struct {
		V       int           `json:"v"`
		ANonce  string        `json:"a_nonce"`
		B       PairPartyWire `json:"b"`
		MACJoin string        `json:"mac_join"`
		EncAd   EncAdPublish  `json:"enc_ad"`
	}
	// PairJoinAnswer is the inviter's answer to a join.
	PairJoinAnswer struct {
		MACAccept string       `json:"mac_accept"`
		EncAd     EncAdPublish `json:"enc_ad"`
	}
	// PairConfirmRequest is the body of POST /v2/pair/confirm.
	PairConfirmRequest struct {
		V      int    `json:"v"`
		ANonce string `json:"a_nonce"`
		BNonce string `json:"b_nonce"`
		Accept bool   `json:"accept"`
		MAC    string `json:"mac"`
	}
	// PairConfirmAnswer is the inviter's answer to a confirmation: State waiting, done or
	// declined; done and declined carry the inviter's confirmation MAC.
	PairConfirmAnswer struct {
		State  string `json:"state"`
		Accept bool   `json:"accept"`
		MAC    string `json:"mac,omitempty"`
	}
	// PairWireError is a pairing error answer: Code is the error's stable word.
	PairWireError struct {
		Error        string `json:"error"`
		Code         string `json:"code"`
		AttemptsLeft *int   `json:"attempts_left,omitempty"`
	}
)

// WirePairParty is p as a join carries it, with addr.
func WirePairParty(p PairParty, addr *string) PairPartyWire {
	w := PairPartyWire{Host: p.Host, HostPubkey: p.HostPubkey, Nonce: p.Nonce, Addr: addr}
	if p.OwnerPubkey != "" {
		w.OwnerPubkey = &p.OwnerPubkey
	}
	return w
}
