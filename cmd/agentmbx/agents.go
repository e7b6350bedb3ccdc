package main

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/agentmbx/agentmbx/api"
)

func newAgentsCmd() *cobra.Command {
	var (
		home   string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "agents [--json]",
		Short: "List the agents of this host",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withConn(cmd, home, func(ctx context.Context, c *conn) error {
				as, err := c.Agents(ctx)
				if err != nil {
					return err
				}
				if asJSON {
					if as == nil {
						as = []api.Agent{}
					}
					return printJSON(cmd.OutOrStdout(), as)
				}
				if len(as) == 0 {
					_, err := fmt.Fprintln(cmd.OutOrStdout(), "no agents yet (add one with `agentmbx agents add NAME`)")
					return err
				}
				return printAgents(cmd.OutOrStdout(), as)
			})
		},
	}
	addHomeFlag(cmd, &home)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the agents as a JSON array")
	cmd.AddCommand(newAgentsAddCmd(&home))
	return cmd
}

func newAgentsAddCmd(home *string) *cobra.Command {
	var (
		role   string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "add NAME [--role R]",
		Short: "Register an agent (or change its role)",
		Long: `Register an agent of this host. Names are lowercase letters, digits and -, 2 to 40
characters. An agent with a role also gets the mail sent to role:ROLE.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withConn(cmd, *home, func(ctx context.Context, c *conn) error {
				a, err := c.AddAgent(ctx, api.Agent{Name: args[0], Role: role})
				if err != nil {
					return err
				}
				if asJSON {
					return printJSON(cmd.OutOrStdout(), a)
				}
				if a.Role != "" {
					_, err = fmt.Fprintf(cmd.OutOrStdout(), "agent %s (role %s)\n", a.Name, a.Role)
				} else {
					_, err = fmt.Fprintf(cmd.OutOrStdout(), "agent %s\n", a.Name)
				}
				return err
			})
		},
	}
	cmd.Flags().StringVar(&role, "role", "", "the agent's role, for mail sent to role:ROLE")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the agent as JSON")
	return cmd
}

// printAgents prints the agents table; a NOTE column appears when incoming mail created an agent
// (nobody registered that name here: it may be a sender's typo).
func printAgents(w io.Writer, as []api.Agent) error {
	created := false
	for _, a := range as {
		created = created || a.CreatedByMail != ""
	}
	head := []string{"NAME", "ROLE"}
	if created {
		head = append(head, "NOTE")
	}
	rows := make([][]string, 0, len(as))
	for _, a := range as {
		row := []string{a.Name, a.Role}
		if created {
			note := ""
			if a.CreatedByMail != "" {
				note = "created by incoming mail from " + a.CreatedByMail
			}
			row = append(row, note)
		}
		rows = append(rows, row)
	}
	return table(w, head, rows)
}
