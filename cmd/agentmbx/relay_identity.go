package main

// The relay's identity, visible: `relay keygen`, `relay info URL`, and the fingerprint line
// `relay serve` prints at start.

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentmbx/agentmbx/internal/fsutil"
	"github.com/agentmbx/agentmbx/internal/shellquote"
	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/relayclient"
	"github.com/agentmbx/agentmbx/relayserver"
)

// printServedKey writes the line a relay operator copies to the hosts' owners:
// "relay key fingerprint: FP (pin it with: agentmbx relay set URL --key FP)".
func printServedKey(w io.Writer, pub, relayURL string) {
	fp := mbx.Fingerprint(pub)
	fmt.Fprintf(w, "relay key fingerprint: %s (pin it with: agentmbx relay set %s --key %s)\n", fp, relayURL, fp)
}

// servedURL is the URL hosts reach a relay bound at addr by, when the address says it (a
// loopback or other specific IP); "URL" when it listens on every interface.
func servedURL(addr, scheme string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "URL"
	}
	ip := net.ParseIP(host)
	if ip == nil || ip.IsUnspecified() {
		return "URL"
	}
	return scheme + "://" + net.JoinHostPort(host, port)
}

func newRelayKeygenCmd() *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "keygen [--out FILE]",
		Short: "Make a new relay key for " + relayserver.EnvRelayKey,
		Long: `Make a new relay private key (base64 of its 32-byte seed), for the ` + relayserver.EnvRelayKey + ` deploy
secret that 'agentmbx relay serve' reads. With --out FILE it is written to FILE, created 0600
whatever the umask (an existing FILE is never overwritten); else it is printed on standard
output. Its fingerprint, and how to serve with it and pin it, go to standard error. Keep the
private key secret.`,
		Example: `  agentmbx relay keygen --out relay.seed
  MBX_RELAY_KEY=$(cat relay.seed) agentmbx relay serve --store-dir ./relay`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			k, err := mbx.GenerateSigningKey(rand.Reader)
			if err != nil {
				return err
			}
			where := "<the key on stdout>"
			if out != "" {
				if err := writeSecretFile(out, []byte(k.Seed()+"\n")); err != nil {
					if errors.Is(err, fs.ErrExist) {
						return hint(fmt.Errorf("relay keygen: %s exists: not overwritten", out),
							"a relay key is a secret that hosts pin: choose another file, or remove this one if you mean to replace the key")
					}
					return fmt.Errorf("relay keygen: %w", err)
				}
				where = "$(cat " + shellquote.Quote(out) + ")"
				fmt.Fprintf(cmd.ErrOrStderr(), "wrote the relay key to %s (0600)\n", out)
			}
			fp := k.Fingerprint()
			fmt.Fprintf(cmd.ErrOrStderr(), `relay key fingerprint: %s
serve with it:  %s=%s agentmbx relay serve --store-dir DIR
hosts pin it:   agentmbx relay set URL --key %s
`, fp, relayserver.EnvRelayKey, where, fp)
			if out != "" {
				return nil
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), k.Seed())
			return err
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "write the key to this new file, 0600 (refuses an existing file)")
	return cmd
}

// writeSecretFile creates path (which must not exist) 0600 from the first byte and writes data
// durably; on an error nothing is left at path.
func writeSecretFile(path string, data []byte) error {
	f, err := fsutil.CreateExclusive(path, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if err = errors.Join(err, f.Close()); err != nil {
		os.Remove(path)
		return err
	}
	return fsutil.SyncDir(filepath.Dir(path))
}

// relayInfo is what `relay info --json` prints: the relay's info as served, and its fingerprint.
type relayInfo struct {
	URL         string     `json:"url"`
	Fingerprint string     `json:"fingerprint"`
	RelayPubkey string     `json:"relay_pubkey"`
	Epoch       string     `json:"epoch"`
	Version     string     `json:"version"`
	Limits      mbx.Limits `json:"limits"`
	// Plain is set for an http:// URL to a host that is not loopback.
	Plain bool `json:"plain_http,omitempty"`
}

func newRelayInfoCmd() *cobra.Command {
	var (
		asJSON bool
		caFile string
	)
	cmd := &cobra.Command{
		Use:   "info URL [--json] [--ca FILE]",
		Short: "Show a relay's key fingerprint, epoch, version and limits, as it serves them",
		Long: `Fetch the relay's info and show it: its key's fingerprint (what 'relay set --key' pins), its
epoch, its version and its limits. Nothing is pinned or stored; it needs no host.`,
		Example: `  agentmbx relay info https://relay.example.com
  agentmbx relay info http://127.0.0.1:7374 --json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			u, err := relayclient.NormalizeURL(args[0])
			if err != nil {
				return usageErr("a relay URL is https://HOST[:PORT] (http:// for loopback or behind your own TLS)", "relay info: %v", err)
			}
			opts, err := relayClientOptions(caFile)
			if err != nil {
				return err
			}
			info, err := relayclient.Discover(cmd.Context(), u, opts)
			if err != nil {
				return explainRelayErr(fmt.Errorf("relay info %s: %w", u, err))
			}
			ri := relayInfo{URL: u, Fingerprint: mbx.Fingerprint(info.RelayPubkey), RelayPubkey: info.RelayPubkey,
				Epoch: info.Epoch, Version: info.Version, Limits: info.Limits, Plain: relayclient.PlainRemote(u)}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), ri)
			}
			return printRelayInfo(cmd.OutOrStdout(), ri)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the info as JSON")
	cmd.Flags().StringVar(&caFile, "ca", "", "trust the relay's certificate when a private CA in this PEM file signed it")
	return cmd
}

func printRelayInfo(w io.Writer, ri relayInfo) error {
	l := ri.Limits
	fmt.Fprintf(w, "relay:       %s\nfingerprint: %s\nkey:         %s\nepoch:       %s\nversion:     %s\n",
		ri.URL, ri.Fingerprint, ri.RelayPubkey, ri.Epoch, orDash(ri.Version))
	fmt.Fprintf(w, "limits:      item %d bytes, batch %d, pull %d items / %d bytes, retention %d days\n",
		l.MaxItemBytes, l.MaxBatch, l.MaxPull, l.MaxPullBytes, l.RetentionDays)
	if ri.Plain {
		fmt.Fprintln(w, "warning:     plain http to a remote host: hops are signed and bodies sealed, but metadata travels in clear; prefer https")
	}
	_, err := fmt.Fprintf(w, "pin it with: agentmbx relay set %s --key %s\n", ri.URL, ri.Fingerprint)
	return err
}

// readCA reads the PEM CA bundle of --ca ("" reads nothing) and checks it holds a certificate.
func readCA(caFile string) ([]byte, error) {
	if caFile == "" {
		return nil, nil
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("--ca: %w", err)
	}
	if _, err := relayclient.CertPool(pem); err != nil {
		return nil, hint(fmt.Errorf("--ca %s: %w", caFile, err), "pass the PEM file of the CA certificate that signed the relay's certificate")
	}
	return pem, nil
}

// relayClientOptions are the relay client options of a command that talks to a relay itself.
func relayClientOptions(caFile string) (*relayclient.Options, error) {
	pem, err := readCA(caFile)
	if err != nil {
		return nil, err
	}
	return &relayclient.Options{CA: pem, Timeout: 15 * time.Second}, nil
}

// explainRelayErr adds what to do to the errors of reaching a relay.
func explainRelayErr(err error) error {
	switch {
	case errors.Is(err, relayclient.ErrUntrustedCert):
		return hint(err, "the relay's certificate must verify against the system roots; for a private CA pass --ca FILE (its PEM certificate)")
	case errors.Is(err, relayclient.ErrV1Only):
		return hint(err, "that relay speaks only the v1 API (AgentMBX 0.5.x before 0.5.5): it has no key to pin; `agentmbx relay set URL --allow-v1` uses it unauthenticated")
	case errors.Is(err, relayclient.ErrTransport):
		return hint(err, "check the URL and that the relay runs (agentmbx relay serve prints its address and key)")
	}
	return err
}
