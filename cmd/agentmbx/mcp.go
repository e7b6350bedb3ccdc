package main

import (
	"context"
	"io"
	"os"

	"github.com/spf13/cobra"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentmbx/agentmbx/client"
	"github.com/agentmbx/agentmbx/host"
	"github.com/agentmbx/agentmbx/internal/version"
	"github.com/agentmbx/agentmbx/mcp"
)

func newMCPCmd() *cobra.Command {
	var home, as string
	cmd := &cobra.Command{
		Use:   "mcp [--home DIR] [--as AGENT]",
		Short: "Serve an agent's mailbox as Model Context Protocol tools on stdio",
		Long: `Serve an agent's mailbox to an AI agent as Model Context Protocol tools, on standard input
and output: mbx_whoami, mbx_agents, mbx_send, mbx_reply, mbx_inbox, mbx_read, mbx_ack, mbx_sent,
mbx_thread, mbx_search and mbx_wait. The agent is --as, else $` + envAgent + `; it is registered on
first use. Each call goes through the daemon when it runs; without it, calls use the store as
the other commands do (mbx_send queues) and mbx_wait says the daemon is needed.

The agent's mail is also offered as resources, mbx://inbox and mbx://thread/{id}; a client
that subscribes is notified (notifications/resources/updated) as soon as new mail for the agent
is delivered, while the daemon runs. Other agents' words are fenced as untrusted data.

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
			t := &sdk.IOTransport{Reader: io.NopCloser(cmd.InOrStdin()), Writer: nopWriteCloser{cmd.OutOrStdout()}}
			return mcp.Serve(cmd.Context(), opts, t)
		},
	}
	addHomeFlag(cmd, &home)
	addAgentFlag(cmd, &as, "the local agent the tools act as", false)
	return cmd
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

// The two ways a tool call reaches the host are both an mcp.Host.
var (
	_ mcp.Host = host.Service(nil)
	_ mcp.Host = (*client.Client)(nil)
)
