package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentmbx/agentmbx/internal/logkey"
	"github.com/agentmbx/agentmbx/internal/termtext"
	"github.com/agentmbx/agentmbx/internal/version"
	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/relayserver"
	"github.com/agentmbx/agentmbx/relayserver/sqlitestore"
)

// newRelayCmd is `agentmbx relay`: run the durable relay, and make its key.
func newRelayCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "relay",
		Short: "Run the relay that carries sealed mail between hosts on different networks",
		Long: `Run the relay that carries sealed mail between hosts on different networks.

Operations on its store: 'relay backup FILE' copies it online, safe while 'relay serve' runs;
'relay restore FILE' puts a backup back (the relay must be stopped) under a new epoch, so hosts
re-push and re-pull what the backup lacks; 'relay rotate-epoch' gives the store a new epoch, which
any restore made another way (a volume snapshot, a file copy) needs before the relay serves again.
'relay deny add|remove|list' keeps the deny list, by host key fingerprint or account client_id,
in the store, while the relay serves or not. 'relay usage' shows what each host key holds in the
store; 'relay reclaim' deletes what the keys of a deny entry hold.`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(newRelayServeCmd(), newRelayKeygenCmd(), newRelayInfoCmd(),
		newRelayBackupCmd(), newRelayBackupsCmd(), newRelayRestoreCmd(), newRelayRotateEpochCmd(), newRelayBenchCmd(),
		newRelayBenchLoadCmd())
	cmd.AddCommand(newRelayHealthcheckCmd(), newRelayDenyCmd(), newRelayUsageCmd(), newRelayReclaimCmd())
	cmd.AddCommand(relayHostCommands()...)
	return cmd
}

func newRelayServeCmd() *cobra.Command {
	var storeDir, db, listen, addrFile, trust, metricsListen, metricsAddrFile, backupDir string
	var backupEvery time.Duration
	var backupKeep int
	var lf logFlags
	var tf relayTLSFlags
	var lim limitFlags
	var af authFlags
	cmd := &cobra.Command{
		Use:   "serve [--store-dir DIR | --db URL] [--listen ADDR] [--tls-cert FILE --tls-key FILE | --acme-domain NAME] [--addr-file FILE] [--trust-proxy MODE] [--metrics-listen ADDR]",
		Short: "Run the relay in the foreground",
		Example: `  agentmbx relay keygen --out relay.seed
  MBX_RELAY_KEY=$(cat relay.seed) agentmbx relay serve --store-dir ./relay --listen 127.0.0.1:7374
  MBX_RELAY_KEY=$(cat relay.seed) agentmbx relay serve --store-dir /var/lib/agentmbx-relay --listen :443 --acme-domain relay.example.com
  agentmbx relay serve --store-dir ./relay --listen :7374 --tls-cert relay.crt --tls-key relay.key.pem`,
		Long: `Run the relay: the v2 relay API over a SQLite store in --store-dir (or $` + relayserver.EnvRelayDir + `).
Every answered push is committed (WAL, synchronous=FULL) before its answer, so a crash loses
nothing that was answered. SIGTERM or Ctrl-C stops it cleanly.

The relay key comes from $` + relayserver.EnvRelayKey + ` (what 'agentmbx relay keygen' prints) or from
relay.key in the store directory, created on first start. A store refuses any other key. At
start it prints the key's fingerprint on standard error, with the 'relay set' line hosts pin it
with.

--db postgres://… (or $` + relayserver.EnvRelayDB + `) serves from a PostgreSQL database instead; any number
of relay processes may serve the same database behind one URL. The key must then come from
$` + relayserver.EnvRelayKey + `, the same on every replica, and the server must run with
synchronous_commit and fsync on.

--listen defaults to :7374; port 0 picks a free one and --addr-file receives the bound
host:port once the relay listens. --trust-proxy (or $` + relayserver.EnvRelayTrustProxy + `) says which
header carries the client address behind a proxy: xff (the rightmost X-Forwarded-For entry) or
cloudflare (CF-Connecting-IP); without it the TCP peer address counts.

HTTPS: --tls-cert FILE --tls-key FILE serve it with that certificate (TLS 1.2 or later, HTTP/2);
--acme-domain NAME obtains and renews a certificate for NAME from Let's Encrypt (ACME TLS-ALPN,
so --listen must be reachable as NAME:443), cached in acme/ in the store directory (or
--acme-cache DIR). Without either the relay speaks plain HTTP: for loopback, or behind a proxy
that terminates TLS (then pass --trust-proxy). Hosts verify the certificate against the system
roots, or a private CA given with 'relay set --ca'.

Operations: GET /healthz answers while the process runs; GET /readyz answers 200 when the store
takes writes, the heartbeat is fresh and the epoch is loaded, else 503 (and during shutdown).
--metrics-listen ADDR serves Prometheus metrics at /metrics (and /healthz, /readyz) on a second,
private listener; or set $` + envMetricsToken + ` to serve /metrics on the main listener to
requests with "Authorization: Bearer <token>". Metrics are off by default. Logs go to standard
error as text or, with --log-format json, one JSON object a line; each request's log lines carry
its request id (X-Request-Id). SIGTERM drains: /readyz turns 503, parked long polls answer, the
listener stops accepting, requests in flight finish (10 s at most), then the store closes.

$` + envRelayKeyFile + ` names a file holding the key (a Docker secret, a systemd credential), read
when $` + relayserver.EnvRelayKey + ` is not set.

Scheduled backups: --backup-dir DIR takes an online backup (as 'relay backup' does) into DIR
every --backup-every (24h) while the relay serves, named relay-YYYYMMDDTHHMMSSZ.db, and keeps the
newest --backup-keep (7). Each backup is logged; a failure is logged and retried (after a minute,
doubling up to the interval) and never stops the relay. The last success is in the metrics
(agentmbx_relay_backup_last_success_timestamp_seconds) and in DIR/last-backup.json, which
'relay backups DIR' shows. A backup holds ciphertext and the relay's metadata, not the relay key;
keep DIR private (it is made 0700, each file 0600).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			db = relayDB(db)
			if storeDir == "" && db == "" {
				storeDir = os.Getenv(relayserver.EnvRelayDir)
			}
			if storeDir == "" && db == "" {
				return usageErr("pass --store-dir DIR (or set "+relayserver.EnvRelayDir+") or --db URL", "relay serve: no store")
			}
			if storeDir != "" && db != "" {
				return usageErr("pass one of them", "relay serve: both --store-dir and --db")
			}
			if lim.maxParked < 0 {
				return usageErr("give a number of polls, or 0 for the default from the memory", "relay serve: --max-parked %d", lim.maxParked)
			}
			var backups *relayserver.BackupSchedule
			if backupDir != "" {
				if db != "" {
					return usageErr("back a PostgreSQL relay up with pg_dump (docs/relay.md)", "relay serve: --backup-dir with --db")
				}
				dir := storeDir
				backups = &relayserver.BackupSchedule{Dir: backupDir, Every: backupEvery, Keep: backupKeep,
					Take: func(ctx context.Context, dest string) (relayserver.Meta, error) {
						return sqlitestore.Backup(ctx, dir, dest)
					}}
				if err := backups.Check(); err != nil || backupKeep == 0 {
					return usageErr(fmt.Sprintf("--backup-every at least %s, --backup-keep at least 1", relayserver.MinBackupEvery), "relay serve: bad backup schedule: %v", err)
				}
			} else if cmd.Flags().Changed("backup-every") || cmd.Flags().Changed("backup-keep") {
				return usageErr("give the directory with --backup-dir DIR", "relay serve: a backup schedule without --backup-dir")
			}
			if trust == "" {
				trust = os.Getenv(relayserver.EnvRelayTrustProxy)
			}
			mode, err := relayserver.ParseTrustProxy(trust)
			if err != nil {
				return usageErr("use xff or cloudflare", "relay serve: unknown --trust-proxy %q", trust)
			}
			log, err := lf.logger(cmd.ErrOrStderr(), "relay serve")
			if err != nil {
				return err
			}
			getenv, err := relayKeyEnv()
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			tlsConf, err := tf.config(storeDir)
			if err != nil {
				if errors.Is(err, errTLSFlags) {
					return usageErr("", "%v", err)
				}
				return err
			}
			opts := lim.apply(relayserver.Options{TrustProxy: mode, Version: version.String(), Logger: log,
				MetricsToken: os.Getenv(envMetricsToken)})
			if opts.Authority, err = af.authority(ctx, log); err != nil {
				return err
			}
			relayserver.TuneGC(os.Getenv)
			var relayPub string
			err = relayserver.Serve(ctx, relayserver.ServeConfig{
				TLS:       tlsConf,
				StoreDir:  storeDir,
				DB:        db,
				Listen:    listen,
				AddrFile:  addrFile,
				Open:      openRelayStore(log, db != ""),
				KeyLoaded: func(pub string) { relayPub = pub },
				Getenv:    getenv,
				Ready: func(addr string) {
					if lf.json() { // standard error carries only JSON lines
						fp := mbx.Fingerprint(relayPub)
						log.Info("relay key fingerprint", logkey.Fingerprint, fp,
							logkey.Pin, "agentmbx relay set "+tf.servedBase(addr, tlsConf != nil)+" --key "+fp)
						return
					}
					printServedKey(cmd.ErrOrStderr(), relayPub, tf.servedBase(addr, tlsConf != nil))
				},
				Options:         opts,
				MetricsListen:   metricsListen,
				MetricsAddrFile: metricsAddrFile,
				Backups:         backups,
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
	cmd.Flags().StringVar(&db, "db", "", dbFlagHelp)
	cmd.Flags().StringVar(&listen, "listen", fmt.Sprintf(":%d", mbx.DefaultRelayPort), "listen address")
	cmd.Flags().StringVar(&addrFile, "addr-file", "", "write the bound host:port to this file once listening")
	cmd.Flags().StringVar(&trust, "trust-proxy", "", "client address from a proxy header: xff or cloudflare (default $"+relayserver.EnvRelayTrustProxy+")")
	tf.add(cmd)
	lim.add(cmd)
	af.add(cmd)
	cmd.Flags().StringVar(&metricsListen, "metrics-listen", "", "serve /metrics, /healthz and /readyz on this private address (default: off)")
	cmd.Flags().StringVar(&metricsAddrFile, "metrics-addr-file", "", "write the metrics listener's bound host:port to this file")
	cmd.Flags().StringVar(&backupDir, "backup-dir", "", "take scheduled online backups into this directory (default: none)")
	cmd.Flags().DurationVar(&backupEvery, "backup-every", relayserver.DefaultBackupEvery, "how often to take a scheduled backup")
	cmd.Flags().IntVar(&backupKeep, "backup-keep", relayserver.DefaultBackupKeep, "how many of the newest scheduled backups to keep")
	addLogFlags(cmd, &lf)
	return cmd
}

// envMetricsToken, when set, serves the relay's /metrics on its main listener behind this bearer
// token (an environment variable rather than a flag, so it stays out of process listings).
const envMetricsToken = "MBX_RELAY_METRICS_TOKEN"

// relayStoreDir is --store-dir, else $MBX_RELAY_DIR, else a usage error naming the command.
func relayStoreDir(flag, command string) (string, error) {
	if flag == "" {
		flag = os.Getenv(relayserver.EnvRelayDir)
	}
	if flag == "" {
		return "", usageErr("pass --store-dir DIR or set "+relayserver.EnvRelayDir, "relay %s: no store directory", command)
	}
	return flag, nil
}

// relayStoreHint adds what to do to the store errors an operator can fix.
func relayStoreHint(err error) error {
	switch {
	case errors.Is(err, relayserver.ErrLocked):
		return hint(err, "a relay is serving this store; stop it first")
	case errors.Is(err, relayserver.ErrRelayKeyMismatch):
		return hint(err, "this backup belongs to another relay; pass --force to restore it anyway (the relay then needs that key)")
	case errors.Is(err, relayserver.ErrSchemaTooNew):
		return hint(err, "this store was written by a newer agentmbx; run that version")
	case errors.Is(err, relayserver.ErrBadBackup):
		return hint(err, "pass a file written by 'agentmbx relay backup'")
	}
	return err
}

func newRelayBackupCmd() *cobra.Command {
	var storeDir string
	cmd := &cobra.Command{
		Use:   "backup FILE [--store-dir DIR]",
		Short: "Copy the relay store to FILE, online",
		Long: `Write a consistent copy of the relay store (relay.db) to FILE with SQLite's VACUUM INTO: one
read snapshot, which does not need the store's lock and does not hold up a relay serving the same
store. The copy is written to a temporary file beside FILE, created 0600 before its first byte,
fsynced and renamed over it. It holds ciphertext bodies and the relay's metadata, not the relay key.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir, err := relayStoreDir(storeDir, "backup")
			if err != nil {
				return err
			}
			m, err := sqlitestore.Backup(cmd.Context(), dir, args[0])
			if err != nil {
				return relayStoreHint(err)
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "backed up %s to %s (epoch %s, schema %d)\n",
				dir, args[0], m.Epoch, m.SchemaVersion)
			return err
		},
	}
	cmd.Flags().StringVar(&storeDir, "store-dir", "", "relay store directory (default $"+relayserver.EnvRelayDir+")")
	return cmd
}

func newRelayRestoreCmd() *cobra.Command {
	var storeDir string
	var force bool
	cmd := &cobra.Command{
		Use:   "restore FILE [--store-dir DIR] [--force]",
		Short: "Replace the relay store with a backup, under a new epoch",
		Long: `Replace the relay store with FILE, a file 'agentmbx relay backup' wrote. The relay must be
stopped: restore refuses while the store's lock is held. FILE must be a relay store this binary
can open and belong to the same relay key as the store directory (its store or relay.key);
--force restores a backup of another relay. The restored store gets a new epoch (hosts then
re-push and re-pull what the backup lacks), records restored_at and restored_from, and keeps
every target's next sequence at least where the replaced store had it. The replaced database is
kept as relay.db.pre-restore. On any error the store is unchanged.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir, err := relayStoreDir(storeDir, "restore")
			if err != nil {
				return err
			}
			res, err := sqlitestore.Restore(cmd.Context(), dir, args[0], &sqlitestore.RestoreOptions{Force: force})
			if err != nil {
				return relayStoreHint(err)
			}
			log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), termtext.TextLogOptions(slog.LevelInfo)))
			if res.Warning != "" {
				log.Warn("relay restore: the replaced store was not fully readable", logkey.Err, res.Warning)
			}
			log.Info("relay store restored", logkey.Dir, dir, logkey.Backup, filepath.Base(args[0]),
				logkey.Epoch, res.Epoch, logkey.PreviousEpoch, res.Previous, logkey.Schema, res.Schema,
				logkey.Kept, res.Kept)
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "restored %s from %s; new epoch %s\n", dir, args[0], res.Epoch)
			return err
		},
	}
	cmd.Flags().StringVar(&storeDir, "store-dir", "", "relay store directory (default $"+relayserver.EnvRelayDir+")")
	cmd.Flags().BoolVar(&force, "force", false, "restore a backup that belongs to another relay key")
	return cmd
}

func newRelayRotateEpochCmd() *cobra.Command {
	var storeDir, db string
	cmd := &cobra.Command{
		Use:   "rotate-epoch [--store-dir DIR | --db URL]",
		Short: "Give the relay store a new epoch (after a restore made another way)",
		Long: `Give the relay store a new epoch, keeping every item. Run it after restoring the store any way
other than 'agentmbx relay restore' (a volume snapshot, a file copy), before the relay serves
again: hosts then re-push and re-pull what the restored copy lacks. The relay must be stopped.
With --db, run it after a pg_restore or a point-in-time recovery of the relay's PostgreSQL
database, with every replica stopped (it refuses while one serves).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if db = relayDB(db); db != "" && storeDir == "" {
				log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), termtext.TextLogOptions(slog.LevelInfo)))
				epoch, err := rotateEpochDB(cmd.Context(), db, log)
				if errors.Is(err, relayserver.ErrLocked) {
					return hint(err, "stop every relay replica serving this database first")
				}
				if err != nil {
					return relayStoreHint(err)
				}
				_, err = fmt.Fprintf(cmd.OutOrStdout(), "new epoch %s\n", epoch)
				return err
			}
			dir, err := relayStoreDir(storeDir, "rotate-epoch")
			if err != nil {
				return err
			}
			if _, err := os.Stat(filepath.Join(dir, sqlitestore.DBFile)); err != nil {
				return fmt.Errorf("relay rotate-epoch: no relay store in %s: %w", dir, err)
			}
			log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), termtext.TextLogOptions(slog.LevelInfo)))
			st, err := sqlitestore.Open(cmd.Context(), dir, &sqlitestore.Options{LockWait: time.Millisecond, Logger: log})
			if err != nil {
				return relayStoreHint(err)
			}
			epoch, err := st.RotateEpoch(cmd.Context())
			if cerr := st.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "new epoch %s\n", epoch)
			return err
		},
	}
	cmd.Flags().StringVar(&storeDir, "store-dir", "", "relay store directory (default $"+relayserver.EnvRelayDir+")")
	cmd.Flags().StringVar(&db, "db", "", dbFlagHelp)
	return cmd
}
