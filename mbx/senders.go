package mbx

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"
)

// MaxSenders is the most sender keys one allowlist may name.
const MaxSenders = 1024

// SenderList is a target host's signed allowlist of the sender keys it accepts through a relay
// (normally its paired peers). Once a target published one, the relay refuses pushes to it from
// other keys. A list with a later IAT replaces an earlier one.
type SenderList struct {
	V          int      `json:"v"`
	Type       string   `json:"type"`
	HostPubkey string   `json:"host_pubkey"`
	Senders    []string `json:"senders"`
	IAT        string   `json:"iat"`
}

// SendersPublish is the body of POST /v2/relay/senders. List is kept raw: the relay checks and
// stores the list exactly as received.
type SendersPublish struct {
	List json.RawMessage `json:"list"`
	Sig  string          `json:"sig"`
}

// SignSenderList builds the allowlist of target with the given sender keys (duplicates removed,
// sorted as JavaScript sorts them, which for base64 is byte order) at now, and signs it. More
// than MaxSenders distinct keys, or an entry that is not a key, is refused: the caller chooses
// which keys to keep.
func SignSenderList(target SigningKey, senders []string, now time.Time) (SenderList, string, error) {
	s := slices.Clone(senders)
	slices.Sort(s)
	s = slices.Compact(s)
	if s == nil {
		s = []string{}
	}
	if len(s) > MaxSenders {
		return SenderList{}, "", fmt.Errorf("sign sender list: %w: %d senders, at most %d", ErrSendersMalformed, len(s), MaxSenders)
	}
	for _, k := range s {
		if !ValidPublicKey(k) {
			return SenderList{}, "", fmt.Errorf("sign sender list: %w: an entry is not a key", ErrSendersMalformed)
		}
	}
	l := SenderList{V: 1, Type: "relay-senders", HostPubkey: target.PublicKey(), Senders: s, IAT: ISOTime(now)}
	in, err := l.SigningInput()
	if err != nil {
		return SenderList{}, "", fmt.Errorf("sign sender list: %w", err)
	}
	return l, target.Sign(in), nil
}

// SigningInput is the canonical JSON of the list.
func (l SenderList) SigningInput() ([]byte, error) { return Canonical(l) }

// Publish is the POST /v2/relay/senders body for the list and its signature.
func (l SenderList) Publish(sig string) (SendersPublish, error) {
	raw, err := MarshalJSON(l)
	if err != nil {
		return SendersPublish{}, err
	}
	return SendersPublish{List: raw, Sig: sig}, nil
}

// IATTime parses the list's time (zero when it does not parse).
func (l SenderList) IATTime() time.Time { t, _ := parseTime(l.IAT); return t }

// CheckSenderList is the relay's check of a published allowlist (its JSON as received) for the
// target key targetPub, at the relay's clock now, against the iat of the list it stores (zero when
// none): the shape, this target, a parseable iat, at most MaxSenders entries that are all keys
// (ErrSendersMalformed); iat at most five minutes ahead of now (ErrSendersFuture); the target's
// signature over the list as received (ErrSendersSignature); and a stored list with the same or a
// later iat wins (ErrSendersStale). The relay stores the senders without duplicates.
func CheckSenderList(list []byte, sig string, targetPub string, now, storedIAT time.Time) (SenderList, error) {
	m, ok := parseObject(list)
	if !ok {
		return SenderList{}, ErrSendersMalformed
	}
	l := SenderList{V: 1}
	var okT, okP, okI bool
	l.Type, okT = getString(m, "type")
	l.HostPubkey, okP = getString(m, "host_pubkey")
	l.IAT, okI = getString(m, "iat")
	arr, okS := m["senders"].([]any)
	if !isNumber(m, "v", 1) || !okT || l.Type != "relay-senders" || !okP || l.HostPubkey != targetPub || !okI || !okS || len(arr) > MaxSenders {
		return SenderList{}, ErrSendersMalformed
	}
	iat, ok := parseTime(l.IAT)
	if !ok {
		return SenderList{}, ErrSendersMalformed
	}
	l.Senders = make([]string, 0, len(arr))
	for _, e := range arr {
		k, isStr := e.(string)
		if !isStr || !ValidPublicKey(k) {
			return SenderList{}, ErrSendersMalformed
		}
		l.Senders = append(l.Senders, k)
	}
	if iat.UnixMilli() > now.UnixMilli()+relaySkew.Milliseconds() {
		return SenderList{}, ErrSendersFuture
	}
	in, err := Canonical(m)
	if err != nil || sig == "" || !Verify(targetPub, in, sig) {
		return SenderList{}, ErrSendersSignature
	}
	if !storedIAT.IsZero() && storedIAT.UnixMilli() >= iat.UnixMilli() {
		return SenderList{}, ErrSendersStale
	}
	return l, nil
}

// UniqueSenders returns the list's senders without duplicates, in their first order: what a
// relay stores.
func (l SenderList) UniqueSenders() []string {
	seen := make(map[string]bool, len(l.Senders))
	out := make([]string, 0, len(l.Senders))
	for _, s := range l.Senders {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}
