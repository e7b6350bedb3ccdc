package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/relayserver"
	"github.com/agentmbx/agentmbx/relayserver/sqlitestore"
)

// newRelayCmd is `agentmbx relay`: run the durable relay, and make its key.
func newRelayCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "relay",
		Short: "Run the relay that carries sealed mail between hosts on different networks",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(newRelayServeCmd(), newRelayKeygenCmd())
	cmd.AddCommand(relayHostCommands()...)
	return cmd
}

func newRelayServeCmd() *cobra.Command {
	var storeDir, listen, addrFile, trust string
	cmd := &cobra.Command{
		Use:   "serve [--store-dir DIR] [--listen ADDR] [--addr-file FILE] [--trust-proxy MODE]",
		Short: "Run the relay in the foreground",
		Long: `Run the relay: the v2 relay API over a SQLite store in --store-dir (or $` + relayserver.EnvRelayDir + `).
Every answered push is committed (WAL, synchronous=FULL) before its answer, so a crash loses
nothing that was answered. SIGTERM or Ctrl-C stops it cleanly.

The relay key comes from $` + relayserver.EnvRelayKey + ` (what 'agentmbx relay keygen' prints) or from
relay.key in the store directory, created on first start. A store refuses any other key.

--listen defaults to :7374; port 0 picks a free one and --addr-file receives the bound
host:port once the relay listens. --trust-proxy (or $` + relayserver.EnvRelayTrustProxy + `) says which
header carries the client address behind a proxy: xff (the rightmost X-Forwarded-For entry) or
cloudflare (CF-Connecting-IP); without it the TCP peer address counts.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if storeDir == "" {
				storeDir = os.Getenv(relayserver.EnvRelayDir)
			}
			if storeDir == "" {
				return usageErr("pass --store-dir DIR or set "+relayserver.EnvRelayDir, "relay serve: no store directory")
			}
			if trust == "" {
				trust = os.Getenv(relayserver.EnvRelayTrustProxy)
			}
			mode, err := relayserver.ParseTrustProxy(trust)
			if err != nil {
				return usageErr("use xff or cloudflare", "relay serve: unknown --trust-proxy %q", trust)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelInfo}))
			err = relayserver.Serve(ctx, relayserver.ServeConfig{
				StoreDir: storeDir,
				Listen:   listen,
				AddrFile: addrFile,
				Open: func(ctx context.Context, dir string) (relayserver.Store, error) {
					return sqlitestore.Open(ctx, dir, &sqlitestore.Options{Logger: log})
				},
				Options: relayserver.Options{TrustProxy: mode, Version: Version, Logger: log},
			})
			switch {
			case errors.Is(err, relayserver.ErrLocked):
				return hint(err, "another relay serves this store; stop it first")
			case errors.Is(err, relayserver.ErrRelayKeyMismatch):
				return hint(err, "this store belongs to another relay key; set %s to that key or use another --store-dir", relayserver.EnvRelayKey)
			case errors.Is(err, relayserver.ErrSchemaTooNew):
				return hint(err, "this store was written by a newer agentmbx; run that version")
			}
			return err
		},
	}
	cmd.Flags().StringVar(&storeDir, "store-dir", "", "relay store directory (default $"+relayserver.EnvRelayDir+")")
	cmd.Flags().StringVar(&listen, "listen", fmt.Sprintf(":%d", mbx.DefaultRelayPort), "listen address")
	cmd.Flags().StringVar(&addrFile, "addr-file", "", "write the bound host:port to this file once listening")
	cmd.Flags().StringVar(&trust, "trust-proxy", "", "client address from a proxy header: xff or cloudflare (default $"+relayserver.EnvRelayTrustProxy+")")
	return cmd
}

func newRelayKeygenCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "keygen",
		Short: "Print a new relay key for " + relayserver.EnvRelayKey,
		Long: `Print a new relay private key (base64 of its 32-byte seed) on standard output, for the
` + relayserver.EnvRelayKey + ` deploy secret. Its public key and fingerprint go to standard error, for
'agentmbx relay set --key'. Keep the private key secret.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			k, err := mbx.GenerateSigningKey(rand.Reader)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "public key:  %s\nfingerprint: %s\n", k.PublicKey(), k.Fingerprint())
			_, err = fmt.Fprintln(cmd.OutOrStdout(), k.Seed())
			return err
		},
	}
}
