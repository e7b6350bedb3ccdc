package main

import (
	"context"
	"log/slog"
	"os"

	"github.com/agentmbx/agentmbx/relayserver"
	"github.com/agentmbx/agentmbx/relayserver/pgstore"
	"github.com/agentmbx/agentmbx/relayserver/sqlitestore"
)

// dbFlagHelp is the help of --db on the relay commands.
const dbFlagHelp = "PostgreSQL URL of a database shared by relay replicas, instead of --store-dir (default $" +
	relayserver.EnvRelayDB + ", which keeps a password out of the process list; PGPASSWORD and ~/.pgpass work too)"

// relayDB is --db, else $MBX_RELAY_DB.
func relayDB(flag string) string {
	if flag == "" {
		return os.Getenv(relayserver.EnvRelayDB)
	}
	return flag
}

// openRelayStore opens the SQLite store in a directory, or the PostgreSQL store at a URL when
// shared is set.
func openRelayStore(log *slog.Logger, shared bool) func(ctx context.Context, loc string) (relayserver.Store, error) {
	return func(ctx context.Context, loc string) (relayserver.Store, error) {
		if shared {
			return pgstore.Open(ctx, loc, &pgstore.Options{Logger: log})
		}
		return sqlitestore.Open(ctx, loc, &sqlitestore.Options{Logger: log})
	}
}

// rotateEpochDB gives the shared database a new epoch; it refuses while a replica serves.
func rotateEpochDB(ctx context.Context, db string, log *slog.Logger) (string, error) {
	st, err := pgstore.Open(ctx, db, &pgstore.Options{Logger: log})
	if err != nil {
		return "", err
	}
	epoch, err := st.RotateEpoch(ctx)
	if cerr := st.Close(); err == nil {
		err = cerr
	}
	return epoch, err
}
