package main

// Dynamic shell completion (cobra's __complete): agent names for --as, peer names for the
// commands that take a host, message ids for those that take an id. Each reads the host of
// --home (its daemon, or the store when it is free) and gives up quietly when it cannot.

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/client"
	"github.com/agentmbx/agentmbx/host"
)

// completeTimeout bounds what one completion may take.
const completeTimeout = 2 * time.Second

// completionHost reaches the host of cmd's --home for a completion: its daemon, else its store
// when no other process holds it (no waiting, unlike the commands).
func completionHost(cmd *cobra.Command) (api.Service, func(), error) {
	homeFlag, _ := cmd.Flags().GetString("home")
	home, err := host.ResolveHome(homeFlag)
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), completeTimeout)
	defer cancel()
	c, err := client.Dial(ctx, home)
	if err == nil {
		return c, func() { c.Close() }, nil
	}
	if !errors.Is(err, client.ErrNoDaemon) {
		return nil, nil, err
	}
	h, err := host.Open(home, &host.Options{LockTimeout: 100 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return nil, nil, err
	}
	return h.Service(), func() { h.Close() }, nil
}

// completeWith runs list on the host and offers the names that begin with what was typed.
func completeWith(cmd *cobra.Command, toComplete string, list func(ctx context.Context, s api.Service) ([]string, error)) ([]string, cobra.ShellCompDirective) {
	s, done, err := completionHost(cmd)
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	defer done()
	ctx, cancel := context.WithTimeout(context.Background(), completeTimeout)
	defer cancel()
	names, err := list(ctx, s)
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var out []string
	for _, n := range names {
		if strings.HasPrefix(strings.ToUpper(n), strings.ToUpper(toComplete)) {
			out = append(out, n)
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

// completeAgents offers this host's agents (for --as).
func completeAgents(cmd *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	return completeWith(cmd, toComplete, func(ctx context.Context, s api.Service) ([]string, error) {
		as, err := s.Agents(ctx)
		var names []string
		for _, a := range as {
			names = append(names, a.Name)
		}
		return names, err
	})
}

// completePeers offers the paired hosts (peers remove HOST), as the first argument only.
func completePeers(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return completeWith(cmd, toComplete, func(ctx context.Context, s api.Service) ([]string, error) {
		ps, err := s.Peers(ctx)
		var names []string
		for _, p := range ps {
			names = append(names, p.Host)
		}
		return names, err
	})
}

// completeMailIDs offers the ids of the --as agent's mail (newest first), or without --as the
// ids of the outbox's rows; several arguments may follow when many is set.
func completeMailIDs(many bool) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		if len(args) > 0 && !many {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		as, _ := cmd.Flags().GetString("as")
		if as == "" {
			as = os.Getenv(envAgent)
		}
		return completeWith(cmd, toComplete, func(ctx context.Context, s api.Service) ([]string, error) {
			var ids []string
			if as != "" {
				msgs, err := s.Inbox(ctx, as, true)
				for i := len(msgs) - 1; i >= 0 && len(ids) < 200; i-- {
					ids = append(ids, msgs[i].ID)
				}
				return ids, err
			}
			return completeOutboxIDs(ctx, s)
		})
	}
}

// completeOutboxIDs offers the message ids of the outbox rows (sent ID, outbox retry ID).
func completeOutboxIDs(ctx context.Context, s api.Service) ([]string, error) {
	rows, err := s.Outbox(ctx)
	seen := map[string]bool{}
	var ids []string
	for i := len(rows) - 1; i >= 0 && len(ids) < 200; i-- {
		if id := rows[i].MsgID; !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	return ids, err
}

// completeSentIDs offers the ids of the outbox's messages, several arguments when many is set.
func completeSentIDs(many bool) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		if len(args) > 0 && !many {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return completeWith(cmd, toComplete, completeOutboxIDs)
	}
}
