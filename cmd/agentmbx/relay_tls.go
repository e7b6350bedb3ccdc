package main

// HTTPS for `relay serve`: a certificate from files (--tls-cert, --tls-key) or from an ACME CA
// (--acme-domain, golang.org/x/crypto/acme/autocert, certificates cached in the store directory).

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
	"golang.org/x/crypto/acme/autocert"
)

// relayTLSFlags are the TLS flags of `relay serve`.
type relayTLSFlags struct {
	cert, key, acmeDomain, acmeEmail, acmeCache string
}

func (f *relayTLSFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.cert, "tls-cert", "", "serve HTTPS with this PEM certificate (chain) file")
	cmd.Flags().StringVar(&f.key, "tls-key", "", "the PEM private key file of --tls-cert")
	cmd.Flags().StringVar(&f.acmeDomain, "acme-domain", "", "serve HTTPS with a certificate for this domain obtained automatically (ACME, Let's Encrypt); --listen must be reachable as DOMAIN:443")
	cmd.Flags().StringVar(&f.acmeEmail, "acme-email", "", "contact address given to the ACME CA (optional)")
	cmd.Flags().StringVar(&f.acmeCache, "acme-cache", "", "where ACME certificates are kept (default: acme/ in the store directory)")
}

// errTLSFlags marks a wrong combination of TLS flags (a usage error).
var errTLSFlags = errors.New("relay serve: TLS flags")

// config returns the TLS config the flags ask for (nil: plain HTTP).
func (f *relayTLSFlags) config(storeDir string) (*tls.Config, error) {
	switch {
	case (f.cert == "") != (f.key == ""):
		return nil, fmt.Errorf("%w: --tls-cert and --tls-key go together", errTLSFlags)
	case f.cert != "" && f.acmeDomain != "":
		return nil, fmt.Errorf("%w: --tls-cert and --acme-domain exclude each other", errTLSFlags)
	case f.cert != "":
		pair, err := tls.LoadX509KeyPair(f.cert, f.key)
		if err != nil {
			return nil, fmt.Errorf("relay serve: TLS certificate: %w", err)
		}
		return modernTLS(&tls.Config{Certificates: []tls.Certificate{pair}}), nil
	case f.acmeDomain != "":
		return f.acme(storeDir)
	}
	return nil, nil
}

// acme is the config of an autocert manager for the one domain, cached on disk.
func (f *relayTLSFlags) acme(storeDir string) (*tls.Config, error) {
	cache := f.acmeCache
	if cache == "" {
		if storeDir == "" {
			return nil, fmt.Errorf("%w: --acme-domain with --db needs --acme-cache DIR", errTLSFlags)
		}
		cache = filepath.Join(storeDir, "acme")
	}
	if err := os.MkdirAll(cache, 0o700); err != nil {
		return nil, fmt.Errorf("relay serve: ACME cache: %w", err)
	}
	m := &autocert.Manager{
		Prompt:     autocert.AcceptTOS,
		HostPolicy: autocert.HostWhitelist(f.acmeDomain),
		Cache:      autocert.DirCache(cache),
		Email:      f.acmeEmail,
	}
	return modernTLS(m.TLSConfig()), nil
}

// modernTLS sets the defaults the relay serves with: TLS 1.2 at least (Go's default suites,
// forward secrecy only), HTTP/2 offered first.
func modernTLS(c *tls.Config) *tls.Config {
	c.MinVersion = tls.VersionTLS12
	if len(c.NextProtos) == 0 {
		c.NextProtos = []string{"h2", "http/1.1"}
	}
	return c
}

// servedBase is the URL hosts pin a relay bound at addr by: https://DOMAIN with ACME,
// scheme://IP:PORT for a specific address, "URL" when it listens on every interface.
func (f *relayTLSFlags) servedBase(addr string, tlsOn bool) string {
	if f.acmeDomain != "" {
		if _, port, err := net.SplitHostPort(addr); err == nil && port != "443" {
			return "https://" + net.JoinHostPort(f.acmeDomain, port)
		}
		return "https://" + f.acmeDomain
	}
	if tlsOn {
		return servedURL(addr, "https")
	}
	return servedURL(addr, "http")
}
