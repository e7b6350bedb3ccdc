package relayclient

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/agentmbx/agentmbx/mbx"
)

// Pin is a relay as the owner pinned it: its base URL and its relay key. A Client talks only to a
// pinned relay, and stops when the relay serves another key.
type Pin struct {
	// URL is the relay's base URL as NormalizeURL returns it (scheme, host, optional port and
	// path prefix, no trailing slash, no query).
	URL string `json:"url"`
	// RelayKey is the relay's base64 Ed25519 public key.
	RelayKey string `json:"relay_pubkey"`
}

// Fingerprint is the fingerprint of the pinned relay key.
func (p Pin) Fingerprint() string { return mbx.Fingerprint(p.RelayKey) }

// String prints the URL and the key's fingerprint.
func (p Pin) String() string { return p.URL + " (" + p.Fingerprint() + ")" }

// Check reports whether the pin is usable: a normalized http(s) URL and a valid key.
func (p Pin) Check() error {
	u, err := NormalizeURL(p.URL)
	if err != nil {
		return err
	}
	if u != p.URL {
		return fmt.Errorf("%w: relay URL %q is not normalized (%q)", ErrInvalid, p.URL, u)
	}
	if !mbx.ValidPublicKey(p.RelayKey) {
		return fmt.Errorf("%w: pinned relay key is not an Ed25519 public key", ErrInvalid)
	}
	return nil
}

// NormalizeURL checks a relay URL the owner typed and returns its normal form: http or https
// (the scheme must be written: a bare host:port is refused rather than guessed), lowercase
// scheme and host, no user info, query or fragment, no trailing slash.
func NormalizeURL(raw string) (string, error) {
	s := strings.TrimSpace(raw)
	if s == "" {
		return "", fmt.Errorf("%w: empty relay URL", ErrInvalid)
	}
	if !strings.Contains(s, "://") {
		return "", fmt.Errorf("%w: relay URL %q has no scheme: write https://%s (or http:// for a relay on this machine)", ErrInvalid, s, s)
	}
	u, err := url.Parse(s)
	if err != nil {
		return "", fmt.Errorf("%w: relay URL: %v", ErrInvalid, err)
	}
	u.Scheme = strings.ToLower(u.Scheme)
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("%w: relay URL scheme %q (want http or https)", ErrInvalid, u.Scheme)
	}
	if u.Host == "" || u.Hostname() == "" {
		return "", fmt.Errorf("%w: relay URL %q has no host", ErrInvalid, raw)
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" || u.ForceQuery {
		return "", fmt.Errorf("%w: relay URL must not carry user info, a query or a fragment", ErrInvalid)
	}
	u.Host = strings.ToLower(u.Host)
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawPath = ""
	return u.String(), nil
}

// PinInfo pins the relay at url from its info answer. With a fingerprint (the owner's --key), the
// served key must match it, else the error wraps ErrRelayKeyChanged; without one the served key
// is trusted on first use, and the caller says so to the owner.
func PinInfo(rawURL string, info mbx.InfoResponse, fingerprint string) (Pin, error) {
	u, err := NormalizeURL(rawURL)
	if err != nil {
		return Pin{}, err
	}
	if !mbx.ValidPublicKey(info.RelayPubkey) {
		return Pin{}, fmt.Errorf("relayclient: pin %s: %w: relay_pubkey is not a key", u, ErrProtocol)
	}
	if fp := strings.TrimSpace(fingerprint); fp != "" {
		want, err := mbx.ParseFingerprint(fp)
		if err != nil {
			return Pin{}, fmt.Errorf("%w: relay key fingerprint: %v", ErrInvalid, err)
		}
		served := mbx.Fingerprint(info.RelayPubkey)
		if want != served || (mbx.ValidPublicKey(fp) && fp != info.RelayPubkey) {
			return Pin{}, &KeyChangedError{URL: u, Pinned: want, Served: served}
		}
	}
	return Pin{URL: u, RelayKey: info.RelayPubkey}, nil
}
