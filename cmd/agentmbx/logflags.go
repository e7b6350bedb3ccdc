package main

import (
	"io"
	"log/slog"
	"strings"

	"github.com/spf13/cobra"

	"github.com/agentmbx/agentmbx/internal/termtext"
)

// logFlags are --log-format and --log-level of the long-running commands (relay serve, daemon).
type logFlags struct {
	format, level string
}

func addLogFlags(cmd *cobra.Command, lf *logFlags) {
	cmd.Flags().StringVar(&lf.format, "log-format", "text", "log format on standard error: text or json (one object a line)")
	cmd.Flags().StringVar(&lf.level, "log-level", "info", "log level: debug, info, warn or error")
}

// logger makes the logger the flags ask for, writing to w. Nothing the programs log carries key
// material, at any level.
func (lf logFlags) logger(w io.Writer, command string) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(lf.level)); err != nil {
		return nil, usageErr("one of debug, info, warn, error", "%s: bad --log-level %q", command, lf.level)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch strings.ToLower(lf.format) {
	case "text", "":
		return slog.New(slog.NewTextHandler(w, termtext.TextLogOptions(level))), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, usageErr("text or json", "%s: bad --log-format %q", command, lf.format)
}

// json reports whether the logs are JSON lines (so nothing else may go to standard error).
func (lf logFlags) json() bool { return strings.EqualFold(lf.format, "json") }
