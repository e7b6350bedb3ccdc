package main

// HTTPS relays: a relay serving a certificate the test generates (its own CA), hosts that trust
// it with relay set --ca and exchange mail through it, and refusals of a certificate nobody
// trusts. ACME is checked without a network: the manager's host policy and cache.

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/doctor"
	"github.com/agentmbx/agentmbx/relayserver"
)

// testCA is a certificate authority made for one test, and a server certificate it signed for
// 127.0.0.1, as PEM files in dir.
type testCA struct {
	caFile, certFile, keyFile string
	pool                      *x509.CertPool
}

func newTestCA(t *testing.T, dir string) testCA {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "agentmbx test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	srvTmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		KeyUsage: x509.KeyUsageDigitalSignature}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, caCert, &srvKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(srvKey)
	if err != nil {
		t.Fatal(err)
	}
	ca := testCA{caFile: filepath.Join(dir, "ca.pem"), certFile: filepath.Join(dir, "relay.crt"), keyFile: filepath.Join(dir, "relay.key.pem"),
		pool: x509.NewCertPool()}
	ca.pool.AddCert(caCert)
	writePEM(t, ca.caFile, "CERTIFICATE", caDER)
	writePEM(t, ca.certFile, "CERTIFICATE", srvDER)
	writePEM(t, ca.keyFile, "EC PRIVATE KEY", keyDER)
	return ca
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestE2ERelayTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test")
	}
	dir := e2eDir(t)
	ca := newTestCA(t, dir)
	relay := startRelay(t, filepath.Join(dir, "relay.addr"), []string{relayserver.EnvRelayKey + "="},
		"--store-dir", filepath.Join(dir, "relay"), "--listen", "127.0.0.1:0", "--tls-cert", ca.certFile, "--tls-key", ca.keyFile)
	url := "https://" + relay.addr
	if !strings.Contains(relay.log.String(), "(pin it with: agentmbx relay set "+url+" --key ") {
		t.Fatalf("relay serve did not print the https pin line:\n%s", relay.log.String())
	}

	// HTTP/2 over TLS 1.2 or later.
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.pool}, ForceAttemptHTTP2: true}}
	resp, err := hc.Get(url + "/v2/relay/info")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.ProtoMajor != 2 || resp.TLS == nil || resp.TLS.Version < tls.VersionTLS12 {
		t.Fatalf("relay answered over %s, TLS %+v", resp.Proto, resp.TLS)
	}

	// A certificate from a CA nobody trusts is refused, with what to do.
	a, b := newNode(t, dir, "alpha"), newNode(t, dir, "beta")
	pinWithoutLAN(t, a, b)
	r := a.run("relay", "set", url, "--key", "0000-0000-0000-0000")
	if r.code == 0 || !strings.Contains(r.stderr, "certificate is not trusted") || !strings.Contains(r.stderr, "--ca") {
		t.Fatalf("relay set to an untrusted certificate: exit %d\n%s", r.code, r.stderr)
	}
	if st := a.relayStatus(); st.Configured {
		t.Fatalf("an untrusted relay was pinned: %+v", st)
	}
	info := relayInfoOf(t, url, "--ca", ca.caFile)
	for _, n := range []*node{a, b} {
		n.must("relay", "set", url, "--key", info.Fingerprint, "--ca", ca.caFile)
	}
	if st := a.relayStatus(); !strings.Contains(st.CA, "BEGIN CERTIFICATE") {
		t.Fatalf("the CA was not kept with the pin: %+v", st)
	}

	// Mail through the HTTPS relay, both ways.
	a.must("agents", "add", "alice")
	b.must("agents", "add", "bob")
	a.start()
	b.start()
	id := a.send("alice", "bob@beta", "over https", "sealed and encrypted in transit")
	if got := b.waitMail("bob", id); got.Body != "sealed and encrypted in transit" {
		t.Fatalf("bob got %+v", got)
	}
	rep := b.send("bob", "alice@alpha", "re: over https", "back")
	a.waitMail("alice", rep)
	rep2, code := a.doctorRun()
	if code != 0 {
		t.Fatalf("doctor: exit %d %+v", code, rep2)
	}
	wantCheck(t, rep2, "relay.reach", doctor.OK, "answers")
}

// relay info without --ca names the untrusted certificate and the flag that fixes it.
func TestRelayInfoUntrustedCertificate(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t, dir)
	pair, err := tls.LoadX509KeyPair(ca.certFile, ca.keyFile)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{pair}})
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.NotFoundHandler()}
	go srv.Serve(ln)
	defer srv.Close()
	cmd := newRootCmd()
	var out, errb strings.Builder
	cmd.SetOut(&out)
	cmd.SetErr(&errb)
	cmd.SetArgs([]string{"relay", "info", "https://" + ln.Addr().String()})
	err = cmd.ExecuteContext(context.Background())
	if err == nil || !strings.Contains(err.Error(), "certificate is not trusted") || !strings.Contains(err.Error(), "unknown authority") {
		t.Fatalf("relay info of an untrusted relay = %v", err)
	}
	var h interface{ Hint() string }
	if !errors.As(err, &h) || !strings.Contains(h.Hint(), "--ca FILE") {
		t.Fatalf("no hint naming --ca: %v", err)
	}
}

func TestRelayTLSFlags(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t, dir)
	tests := []struct {
		name  string
		flags relayTLSFlags
		bad   bool
	}{
		{"plain", relayTLSFlags{}, false},
		{"files", relayTLSFlags{cert: ca.certFile, key: ca.keyFile}, false},
		{"cert without key", relayTLSFlags{cert: ca.certFile}, true},
		{"files and acme", relayTLSFlags{cert: ca.certFile, key: ca.keyFile, acmeDomain: "relay.example.com"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := tt.flags.config(dir)
			if (err != nil) != tt.bad {
				t.Fatalf("config = %v, %v", c, err)
			}
			if c != nil && (c.MinVersion != tls.VersionTLS12 || c.NextProtos[0] != "h2") {
				t.Fatalf("config MinVersion %x NextProtos %v", c.MinVersion, c.NextProtos)
			}
		})
	}
}

// ACME: the manager serves only the configured domain (no CA is asked for another name), offers
// HTTP/2 and the ACME TLS-ALPN protocol, and caches in the store directory.
func TestRelayACMEConfig(t *testing.T) {
	dir := t.TempDir()
	f := relayTLSFlags{acmeDomain: "relay.example.com"}
	c, err := f.config(dir)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "acme")); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("ACME cache dir: %v %v", fi, err)
	}
	if !strings.Contains(strings.Join(c.NextProtos, ","), "acme-tls/1") || c.NextProtos[0] != "h2" {
		t.Fatalf("NextProtos = %v", c.NextProtos)
	}
	if _, err := c.GetCertificate(&tls.ClientHelloInfo{ServerName: "other.example.com"}); err == nil ||
		!strings.Contains(err.Error(), "not configured") {
		t.Fatalf("a certificate for another name: %v", err)
	}
	if _, err := (&relayTLSFlags{acmeDomain: "relay.example.com"}).config(""); err == nil {
		t.Fatal("ACME without a store directory or --acme-cache was accepted")
	}
	if got := f.servedBase("[::]:443", true); got != "https://relay.example.com" {
		t.Fatalf("servedBase = %q", got)
	}
}
