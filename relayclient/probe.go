package relayclient

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/agentmbx/agentmbx/mbx"
)

// Probe is a relay's info as Discover fetches it, with the relay's clock (its Date header).
type Probe struct {
	Info mbx.InfoResponse
	// Date is the relay's clock when it answered (zero when it sent no readable Date).
	Date time.Time
	// Local is this host's clock when the answer arrived.
	Local time.Time
}

// Skew is how far the relay's clock is ahead of this host's (negative: behind). The Date header
// has whole seconds, so a skew under a second or two means nothing. Zero without a Date.
func (p Probe) Skew() time.Duration {
	if p.Date.IsZero() {
		return 0
	}
	return p.Date.Sub(p.Local.Truncate(time.Second))
}

// DiscoverProbe is Discover that also reports the relay's clock, for `agentmbx doctor`.
func DiscoverProbe(ctx context.Context, rawURL string, opts *Options) (Probe, error) {
	base, err := NormalizeURL(rawURL)
	if err != nil {
		return Probe{}, fmt.Errorf("relayclient: discover: %w", err)
	}
	s, err := newSettings(opts)
	if err != nil {
		return Probe{}, fmt.Errorf("relayclient: discover: %w", err)
	}
	a, err := send(ctx, &s, base, request{op: "info", method: "GET", path: "/v2/relay/info", max: maxSmallAnswer, retry: true}, nil)
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			return Probe{}, fmt.Errorf("%w: %w", ErrV1Only, err)
		}
		return Probe{}, err
	}
	info, err := checkInfo(a, "")
	if err != nil {
		return Probe{}, err
	}
	p := Probe{Info: info, Local: s.clock()}
	if d, err := http.ParseTime(a.date); err == nil {
		p.Date = d
	}
	return p, nil
}

// transportError wraps a failed exchange in ErrTransport, and in ErrUntrustedCert too when the
// relay's certificate did not verify, with what to do about it.
func transportError(op string, err error) error {
	var ua x509.UnknownAuthorityError
	var hn x509.HostnameError
	var ci x509.CertificateInvalidError
	var tv *tls.CertificateVerificationError
	switch {
	case errors.As(err, &ua):
		return fmt.Errorf("relayclient: %s: %w: %w: signed by an unknown authority (a private CA needs --ca FILE)", op, ErrTransport, ErrUntrustedCert)
	case errors.As(err, &hn):
		return fmt.Errorf("relayclient: %s: %w: %w: %v", op, ErrTransport, ErrUntrustedCert, hn.Error())
	case errors.As(err, &ci):
		return fmt.Errorf("relayclient: %s: %w: %w: %v", op, ErrTransport, ErrUntrustedCert, ci.Error())
	case errors.As(err, &tv):
		return fmt.Errorf("relayclient: %s: %w: %w: %v", op, ErrTransport, ErrUntrustedCert, tv.Err)
	}
	return fmt.Errorf("relayclient: %s: %w: %w", op, ErrTransport, err)
}

// PlainRemote reports whether u is a plain http:// URL to a host that is not loopback: allowed
// (hops are signed and bodies sealed) but its metadata travels in clear, so `relay set` and
// `doctor` warn.
func PlainRemote(u string) bool {
	p, err := url.Parse(u)
	if err != nil || !strings.EqualFold(p.Scheme, "http") {
		return false
	}
	h := p.Hostname()
	if strings.EqualFold(h, "localhost") {
		return false
	}
	ip := net.ParseIP(h)
	return ip == nil || !ip.IsLoopback()
}
