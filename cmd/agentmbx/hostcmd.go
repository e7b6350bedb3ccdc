package main

// What the host commands share: the --home flag, reaching the host (daemon or store), output in
// tables or JSON, confirmations, and hints for the host's errors.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/spf13/cobra"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/client"
	"github.com/agentmbx/agentmbx/host"
	"github.com/agentmbx/agentmbx/host/card"
	"github.com/agentmbx/agentmbx/internal/termtext"
)

// openRetry is how long a command keeps trying to reach a host whose store is locked but whose
// daemon does not answer yet (a daemon starting up holds the lock a moment before its socket).
const openRetry = 10 * time.Second

// addHomeFlag gives cmd (and its subcommands) the --home flag.
func addHomeFlag(cmd *cobra.Command, home *string) {
	cmd.PersistentFlags().StringVar(home, "home", "", "host home directory (default $"+host.EnvHome+", else ~/.local/share/agentmbx)")
}

// conn is a host reached by a command: through its daemon's socket when one runs, else on its
// store opened by this process. Either way it is an api.Service.
type conn struct {
	api.Service
	daemon *client.Client // set when the daemon answers
	host   *host.Host     // set when the store is open here
}

// openHost reaches the host of the home named by the --home flag (or its defaults).
func openHost(ctx context.Context, cmd *cobra.Command, homeFlag string) (*conn, error) {
	home, err := host.ResolveHome(homeFlag)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(openRetry)
	for {
		c, err := client.Dial(ctx, home)
		if err == nil {
			return &conn{Service: c, daemon: c}, nil
		}
		if !errors.Is(err, client.ErrNoDaemon) {
			return nil, err
		}
		h, err := host.Open(home, &host.Options{Logger: cliLogger(cmd)})
		if err == nil {
			return &conn{Service: h.Service(), host: h}, nil
		}
		if !errors.Is(err, api.ErrLocked) || time.Now().After(deadline) {
			return nil, explain(err)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Close releases the daemon connection or closes the store.
func (c *conn) Close() error {
	if c.host != nil {
		return c.host.Close()
	}
	return c.daemon.Close()
}

// Card returns the host's signed card naming addr as its LAN address.
func (c *conn) Card(ctx context.Context, addr string) ([]byte, error) {
	if c.host != nil {
		return c.host.Card(ctx, addr)
	}
	return c.daemon.Card(ctx, addr)
}

// cliLogger is the logger of a host opened by a short command: warnings and worse, on stderr.
func cliLogger(cmd *cobra.Command) *slog.Logger {
	return slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), termtext.TextLogOptions(slog.LevelWarn)))
}

// withConn runs fn on the host of the command's home and closes it afterwards.
func withConn(cmd *cobra.Command, homeFlag string, fn func(ctx context.Context, c *conn) error) error {
	ctx := cmd.Context()
	c, err := openHost(ctx, cmd, homeFlag)
	if err != nil {
		return err
	}
	err = fn(ctx, c)
	if cerr := c.Close(); err == nil && cerr != nil {
		err = cerr
	}
	return explain(err)
}

// printJSON writes v as indented JSON (HTML characters left raw) and a newline.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// errNoTerminal is returned when a command needs a person's answer and has no terminal to ask.
var errNoTerminal = errors.New("confirmation needed, but standard input is not a terminal")

// errDeclined is returned when the person answered no.
var errDeclined = errors.New("declined")

// confirm asks question on the terminal and returns nil on yes. With yes set it asks nothing.
// Without a terminal on standard input (or when stdinUsed, because the input was read from it)
// it fails at once with a hint; it never waits on input that is not a person's.
func confirm(cmd *cobra.Command, yes, stdinUsed bool, question, yesHint string) error {
	if yes {
		return nil
	}
	f, ok := cmd.InOrStdin().(*os.File)
	if stdinUsed || !ok || !isTerminal(f) {
		return hint(errNoTerminal, "%s", yesHint)
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "%s [y/N] ", question)
	line, err := bufio.NewReader(f).ReadString('\n')
	if err != nil && line == "" {
		return fmt.Errorf("%w (no answer)", errDeclined)
	}
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return nil
	}
	return errDeclined
}

// isTerminal reports whether f is a terminal.
func isTerminal(f *os.File) bool {
	return isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd())
}

// hint attaches a hint to err (printErr prints it on its own line).
func hint(err error, format string, args ...any) error {
	return client.WithHint(err, format, args...)
}

// usageErr is an error in how a command was called (exit status 2), with a hint when h is set.
func usageErr(h, format string, args ...any) error {
	err := fmt.Errorf(format, args...)
	if h == "" {
		return &usageError{err}
	}
	return &usageError{hint(err, "%s", h)}
}

// hints says what to do about the host's errors, for those that carry no hint of their own.
var hints = []struct {
	err  error
	hint string
}{
	{api.ErrNotInitialized, "create the host with `agentmbx init --host NAME`, or point --home (or $" + host.EnvHome + ") at its home"},
	{api.ErrHostExists, "this home already has a host identity; give another --home to create a new host"},
	{api.ErrLocked, "another agentmbx process holds the store; if the daemon is starting, retry in a moment"},
	{api.ErrUnknownHost, "pin that host first (`agentmbx pair` and `agentmbx join`, or `agentmbx peers add CARD`); `agentmbx peers` lists the pinned ones"},
	{api.ErrNoRecipients, "register the agent with `agentmbx agents add NAME`, or address a paired host as name@host"},
	{api.ErrReserved, "the name mbx belongs to the host's own alerts; choose another agent name"},
	{api.ErrPeerKeyMismatch, "a host of that name is pinned with another key; if it really got a new identity, `agentmbx peers remove HOST` first"},
	{api.ErrPeerKeyInUse, "that key is pinned under another name; `agentmbx peers` shows which"},
	{api.ErrSelf, "that is this host's own card or name"},
	{card.ErrSignature, "the card was changed after it was signed; ask its host for a fresh `agentmbx id --card`"},
	{card.ErrMalformed, "a card is the JSON that `agentmbx id --card` prints on the other host"},
	{card.ErrFuture, "the card is dated ahead of this host's clock; check the clocks of both hosts"},
	{api.ErrPairBusy, "another `agentmbx pair` is waiting; finish it or let its token expire"},
	{api.ErrPairExpired, "start again with `agentmbx pair` and use its new token"},
	{api.ErrPairToken, "check the token `agentmbx pair` printed on the other host"},
	{api.ErrPairBurned, "start again with `agentmbx pair` and use its new token"},
	{api.ErrPairConflict, "a host of that name is pinned with another key; `agentmbx peers remove HOST` first if it really got a new identity"},
}

// explain attaches a hint to err when it is one of the host's errors and has no hint yet.
func explain(err error) error {
	if err == nil {
		return nil
	}
	var h interface{ Hint() string }
	if errors.As(err, &h) && h.Hint() != "" {
		return err
	}
	for _, x := range hints {
		if errors.Is(err, x.err) {
			return hint(err, "%s", x.hint)
		}
	}
	return err
}
