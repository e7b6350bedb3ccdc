package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/mcp"
)

// maxHookInput bounds the hook input notify reads from stdin (Claude Code's is a small JSON
// object; a prompt in it can be long).
const maxHookInput = 4 << 20

func newNotifyCmd() *cobra.Command {
	var home, as, format string
	cmd := &cobra.Command{
		Use:   "notify [--as AGENT] [--format text|claude-code|codex] [CODEX_EVENT_JSON]",
		Short: "Print a notice of new mail once, for an agent runtime's hook",
		Long: `Print a short notice of the agent's new mail that no earlier notice announced: how many
messages, each one's sender (with its host key) and subject, fenced as other agents' words, and
how to read them. Print nothing when there is none. Each message is announced once: the host
marks it announced, and mail already listed or read is not news.

--format text        the notice as text
--format claude-code the JSON a Claude Code UserPromptSubmit or SessionStart hook prints to add
                     context (hookSpecificOutput.additionalContext); the hook's input is read
                     from stdin for its event name
--format codex       one line for a desktop notifier, as Codex's notify setting runs it: Codex
                     appends its event as a JSON argument, and only agent-turn-complete is
                     answered (other events print nothing and announce nothing)

In the claude-code format every failure exits 1, never 2 (which would block the prompt).`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			err := runNotify(cmd, home, as, format, args)
			if err != nil && format == "claude-code" {
				var ue *usageError
				if errors.As(err, &ue) {
					err = ue.err // exit 1: Claude Code blocks the prompt on 2
				}
			}
			return err
		},
	}
	addHomeFlag(cmd, &home)
	addAgentFlag(cmd, &as, "the local agent whose mail to announce", false)
	cmd.Flags().StringVar(&format, "format", "text", "text, claude-code or codex")
	return cmd
}

// claudeHookInput is the part of a Claude Code hook's input notify reads.
type claudeHookInput struct {
	HookEventName string `json:"hook_event_name"`
}

// codexEvent is the part of Codex's notify argument notify reads.
type codexEvent struct {
	Type string `json:"type"`
}

func runNotify(cmd *cobra.Command, home, as, format string, args []string) error {
	if as == "" {
		as = os.Getenv(envAgent)
	}
	if as == "" {
		return usageErr("", "notify: %w", errNoAgent)
	}
	event := ""
	switch format {
	case "text":
		if len(args) > 0 {
			return usageErr("", "notify: an argument is only taken with --format codex")
		}
	case "claude-code":
		if len(args) > 0 {
			return usageErr("", "notify: an argument is only taken with --format codex")
		}
		data, err := io.ReadAll(io.LimitReader(cmd.InOrStdin(), maxHookInput+1))
		if err != nil {
			return fmt.Errorf("notify: read the hook input: %w", err)
		}
		if len(data) > maxHookInput {
			return fmt.Errorf("notify: the hook input is over %d bytes", maxHookInput)
		}
		event = "UserPromptSubmit" // run by hand, with nothing on stdin
		if len(data) > 0 {
			var in claudeHookInput
			if err := json.Unmarshal(data, &in); err != nil {
				return fmt.Errorf("notify: the hook input on stdin is not Claude Code's JSON: %w", err)
			}
			event = in.HookEventName
		}
		if event != "UserPromptSubmit" && event != "SessionStart" {
			return fmt.Errorf("notify: run it as a UserPromptSubmit or SessionStart hook (this is %q): only those add context", event)
		}
	case "codex":
		if len(args) == 1 {
			var ev codexEvent
			if err := json.Unmarshal([]byte(args[0]), &ev); err != nil {
				return usageErr("Codex's notify setting appends its event as JSON", "notify: the argument is not Codex's event JSON: %v", err)
			}
			if ev.Type != "agent-turn-complete" {
				return nil
			}
		}
	default:
		return usageErr("", "notify: --format %q: text, claude-code or codex", format)
	}
	return withConn(cmd, home, func(ctx context.Context, c *conn) error {
		ns, ok := c.Service.(api.NoticeService)
		if !ok {
			return errors.New("this host has no notices")
		}
		p, err := ns.Notices(ctx, api.NoticeRequest{Agent: as})
		if err != nil {
			return err
		}
		if len(p.Messages) == 0 && p.More == 0 {
			return nil
		}
		out := cmd.OutOrStdout()
		if format == "codex" {
			_, err := fmt.Fprintln(out, mcp.NoticeLine(as, p))
			return err
		}
		h, _ := c.Service.(mcp.Host)
		txt, err := mcp.NoticeText(ctx, h, as, p)
		if err != nil {
			return err
		}
		if format == "text" {
			_, err := fmt.Fprintln(out, txt)
			return err
		}
		type hookOut struct {
			HookEventName     string `json:"hookEventName"`
			AdditionalContext string `json:"additionalContext"`
		}
		return json.NewEncoder(out).Encode(struct {
			HookSpecificOutput hookOut `json:"hookSpecificOutput"`
		}{hookOut{event, txt}})
	})
}
