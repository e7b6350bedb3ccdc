package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentmbx/agentmbx/client"
	"github.com/agentmbx/agentmbx/host"
	"github.com/agentmbx/agentmbx/internal/version"
	"github.com/agentmbx/agentmbx/mcp"
)

func newMCPCmd() *cobra.Command {
	var home, as, httpAddr string
	var allowRemote bool
	cmd := &cobra.Command{
		Use:   "mcp [--home DIR] [--as AGENT] [--http ADDR [--allow-remote]]",
		Short: "Serve an agent's mailbox as Model Context Protocol tools on stdio or HTTP",
		Long: `Serve an agent's mailbox to an AI agent as Model Context Protocol tools, on standard input
and output: mbx_whoami, mbx_agents, mbx_send, mbx_reply, mbx_inbox, mbx_read, mbx_ack, mbx_sent,
mbx_thread, mbx_search and mbx_wait. The agent is --as, else $` + envAgent + `; it is registered on
first use. Each call goes through the daemon when it runs; without it, calls use the store as
the other commands do (mbx_send queues) and mbx_wait says the daemon is needed.

The agent's mail is also offered as resources, mbx://inbox and mbx://thread/{id}; a client
that subscribes is notified (notifications/resources/updated) as soon as new mail for the agent
is delivered, while the daemon runs. Other agents' words are fenced as untrusted data.

With --http ADDR (host:port) it serves Streamable HTTP instead, for agents in containers and
tools that cannot spawn it: every request must carry "Authorization: Bearer TOKEN", the token
in the host home's ` + mcp.TokenFile + ` file (made on first use, mode 0600). ADDR must be a loopback
address (127.0.0.1:PORT, [::1]:PORT, localhost:PORT) unless --allow-remote: the token then
crosses the network in clear text, so put TLS in front.

Register it with Claude Code:  claude mcp add agentmbx -- agentmbx mcp --as NAME`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if as == "" {
				as = os.Getenv(envAgent)
			}
			if as == "" {
				return usageErr("name the agent with --as NAME or $"+envAgent, "mcp: no agent")
			}
			opts := mcp.Options{Agent: as, Version: version.String(), Logger: cliLogger(cmd),
				Connect: func(ctx context.Context) (mcp.Conn, error) {
					c, err := openHost(ctx, cmd, home)
					if err != nil {
						return mcp.Conn{}, err
					}
					h, _ := c.Service.(mcp.Host) // the daemon's client and the store's host both are
					return mcp.Conn{Host: h, Daemon: c.daemon != nil, Close: c.Close}, nil
				}}
			if httpAddr != "" {
				return serveMCPHTTP(cmd, home, httpAddr, allowRemote, opts)
			}
			if allowRemote {
				return usageErr("", "mcp: --allow-remote goes with --http")
			}
			t := &sdk.IOTransport{Reader: io.NopCloser(cmd.InOrStdin()), Writer: nopWriteCloser{cmd.OutOrStdout()}}
			return mcp.Serve(cmd.Context(), opts, t)
		},
	}
	addHomeFlag(cmd, &home)
	addAgentFlag(cmd, &as, "the local agent the tools act as", false)
	cmd.Flags().StringVar(&httpAddr, "http", "", "serve Streamable HTTP on this address (host:port) instead of stdio")
	cmd.Flags().BoolVar(&allowRemote, "allow-remote", false, "let --http listen on an address that is not loopback")
	return cmd
}

// serveMCPHTTP serves the tools over Streamable HTTP on addr until the command's context ends.
func serveMCPHTTP(cmd *cobra.Command, homeFlag, addr string, allowRemote bool, opts mcp.Options) error {
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return usageErr("give host:port, like 127.0.0.1:8765", "mcp: --http %q: %v", addr, err)
	}
	if !mcp.Loopback(addr) && !allowRemote {
		return usageErr("listen on 127.0.0.1:PORT, or add --allow-remote (and put TLS in front)",
			"mcp: --http %s is not a loopback address", addr)
	}
	home, err := host.ResolveHome(homeFlag)
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(home, host.StateFile)); err != nil {
		return fmt.Errorf("mcp: %s is not a host home (run `agentmbx init`): %w", home, err)
	}
	token, err := mcp.LoadToken(home)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("mcp: %w", err)
	}
	fmt.Fprintf(cmd.OutOrStdout(), "serving MCP for %s on http://%s/ (bearer token in %s)\n", opts.Agent, ln.Addr(), filepath.Join(home, mcp.TokenFile))
	return mcp.ServeHTTP(cmd.Context(), opts, ln, token)
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

// The two ways a tool call reaches the host are both an mcp.Host.
var (
	_ mcp.Host = host.Service(nil)
	_ mcp.Host = (*client.Client)(nil)
)
