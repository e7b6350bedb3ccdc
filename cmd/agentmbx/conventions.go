package main

// What every command shares, applied to the whole tree once it is built: an unknown subcommand
// or flag is a usage error that suggests the nearest name, and --as falls back to $MBX_AGENT.

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// envAgent names the agent of the commands that take --as, when --as is not given.
const envAgent = "MBX_AGENT"

// annRequired marks a flag (in its annotations) that the command needs; unlike cobra's
// MarkFlagRequired, --as is checked after $MBX_AGENT had its say.
const annRequired = "agentmbx_required"

// annGroup marks a command that only groups others (run alone, it shows its help).
const annGroup = "agentmbx_group"

// applyConventions walks the command tree under root.
func applyConventions(root *cobra.Command) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.SuggestionsMinimumDistance = 2
		if c.HasSubCommands() {
			c.Args = subcommandArgs(c.Args)
			if c.Run == nil && c.RunE == nil {
				// A group of commands: without a subcommand, its help.
				c.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
				if c.Annotations == nil {
					c.Annotations = map[string]string{}
				}
				c.Annotations[annGroup] = "true"
			}
		}
		c.SetFlagErrorFunc(flagError)
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error { return agentFromEnv(cmd) }
}

// subcommandArgs is the Args of a command with subcommands: arguments that the command itself
// does not take (next refuses them, or it has no next) are an unknown subcommand, with the
// nearest names as the hint.
func subcommandArgs(next cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			return nil
		}
		if next == nil {
			return unknownCommand(cmd, args[0])
		}
		if err := next(cmd, args); err != nil {
			return unknownCommand(cmd, args[0])
		}
		return nil
	}
}

// unknownCommand is the usage error for `cmd name` when cmd has no subcommand name.
func unknownCommand(cmd *cobra.Command, name string) error {
	err := fmt.Errorf("unknown command %q for %q", name, cmd.CommandPath())
	var hints []string
	for _, s := range cmd.SuggestionsFor(name) {
		hints = append(hints, "`"+cmd.CommandPath()+" "+s+"`")
	}
	if len(hints) > 0 {
		return usageErr("did you mean "+strings.Join(hints, " or ")+"?", "%v", err)
	}
	return usageErr("`"+cmd.CommandPath()+" --help` lists its commands", "%v", err)
}

// flagError turns pflag's unknown-flag errors into usage errors with the nearest flag names.
func flagError(cmd *cobra.Command, err error) error {
	var name string
	if ne := (*pflag.NotExistError)(nil); errors.As(err, &ne) {
		// -subject typed for --subject is the shorthand group "subject": compare it whole.
		name = ne.GetSpecifiedName()
		if g := ne.GetSpecifiedShortnames(); g != "" {
			name = g
		}
	}
	if name == "" {
		return &usageError{err}
	}
	var near []string
	seen := map[string]bool{}
	consider := func(f *pflag.Flag) {
		if f.Hidden || seen[f.Name] {
			return
		}
		seen[f.Name] = true
		if d := levenshtein(strings.ToLower(name), f.Name); d <= 2 || strings.HasPrefix(f.Name, name) {
			near = append(near, "--"+f.Name)
		}
	}
	cmd.Flags().VisitAll(consider)
	cmd.InheritedFlags().VisitAll(consider)
	slices.Sort(near)
	if len(near) > 0 {
		return &usageError{hint(err, "did you mean %s?", strings.Join(near, " or "))}
	}
	return &usageError{hint(err, "`%s --help` lists its flags", cmd.CommandPath())}
}

// levenshtein is the edit distance between a and b (in bytes: flag names are ASCII).
func levenshtein(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// addAgentFlag gives cmd the --as flag, defaulting to $MBX_AGENT; required makes the command
// refuse to run with neither.
func addAgentFlag(cmd *cobra.Command, as *string, usage string, required bool) {
	cmd.Flags().StringVar(as, "as", "", usage+" (default $"+envAgent+")")
	if required {
		cmd.Flags().SetAnnotation("as", annRequired, []string{"true"})
	}
	cmd.RegisterFlagCompletionFunc("as", completeAgents)
}

// errNoAgent is the usage error of a command that needs an agent and got none.
var errNoAgent = errors.New("which agent? give --as NAME or set " + envAgent)

// agentFromEnv fills --as from $MBX_AGENT when the command has the flag and it was not given, and
// refuses a command that needs an agent and has none.
func agentFromEnv(cmd *cobra.Command) error {
	f := cmd.Flags().Lookup("as")
	if f == nil {
		return nil
	}
	if !f.Changed {
		if v := os.Getenv(envAgent); v != "" {
			if err := f.Value.Set(v); err != nil {
				return usageErr("", "$%s: %v", envAgent, err)
			}
		}
	}
	if f.Value.String() == "" && f.Annotations[annRequired] != nil {
		return usageErr("`agentmbx agents` lists this host's agents", "%v", errNoAgent)
	}
	return nil
}
