package termtext

import "log/slog"

// LogAttr is a slog.HandlerOptions.ReplaceAttr for text logs read on a terminal: a string value
// (the message among them) or an error is escaped with Line, so a peer's name or error text
// cannot drive the terminal or reorder the line. JSON logs keep the exact text.
func LogAttr(_ []string, a slog.Attr) slog.Attr {
	switch a.Value.Kind() {
	case slog.KindString:
		if s := a.Value.String(); Line(s) != s {
			a.Value = slog.StringValue(Line(s))
		}
	case slog.KindAny:
		if err, ok := a.Value.Any().(error); ok {
			a.Value = slog.StringValue(Line(err.Error()))
		}
	}
	return a
}

// TextLogOptions returns text-log handler options at level with LogAttr.
func TextLogOptions(level slog.Leveler) *slog.HandlerOptions {
	return &slog.HandlerOptions{Level: level, ReplaceAttr: LogAttr}
}
