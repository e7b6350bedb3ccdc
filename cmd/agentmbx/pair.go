package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/host"
	"github.com/agentmbx/agentmbx/lan"
)

// cancelUnlessDone ends the pairing session unless *done: a command that leaves early (an
// error, a declined code, Ctrl-C) leaves no session open behind it.
func cancelUnlessDone(ctx context.Context, p api.PairingService, done *bool) {
	if *done {
		return
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	p.CancelPairing(cctx)
}

// pairing is the LAN pairing of the daemon (over its socket) or, without one, of the open store.
func (c *conn) pairing() api.PairingService {
	if c.host != nil {
		return c.host.Pairing()
	}
	return c.daemon
}

// canConfirm fails at once when a confirmation will be needed and nobody can give it.
func canConfirm(cmd *cobra.Command, yes bool, what string) error {
	if yes || stdinIsTerminal(cmd) {
		return nil
	}
	return hint(errNoTerminal, "%s", what)
}

const pairYesHint = "run it in a terminal to compare the code, or add --yes to accept the code without asking (compare the printed codes yourself)"

func newPairCmd() *cobra.Command {
	var (
		home, listen string
		ttl          time.Duration
		yes          bool
	)
	cmd := &cobra.Command{
		Use:   "pair [--ttl DURATION] [--listen ADDR] [--yes]",
		Short: "Pair with a host on the LAN: print a one-time token and wait for it to join",
		Long: `Pair with another host on the LAN. pair prints a one-time token and the join command to run
on the other host, then waits. When the other host joins, both show the same 6-digit code,
computed from the whole exchange: compare them, and confirm on both sides. The peer is pinned
only when both confirm. The token expires (--ttl, default 10m) and works once.

With a daemon running, the daemon serves the pairing on its LAN address. Without one, pair
listens itself for the session (--listen, default the host's listen address).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := canConfirm(cmd, yes, pairYesHint); err != nil {
				return err
			}
			return withConn(cmd, home, func(ctx context.Context, c *conn) error {
				w := cmd.OutOrStdout()
				var addr string
				if c.host != nil {
					stop, bound, err := servePairLAN(c.host, listen)
					if err != nil {
						return err
					}
					defer stop()
					addr = bound
				} else {
					if listen != "" {
						return usageErr("the daemon pairs on its own LAN address; drop --listen (or stop the daemon)", "pair: --listen with a daemon running")
					}
					st, err := c.Status(ctx)
					if err != nil {
						return err
					}
					addr = st.Listen
				}
				p := c.pairing()
				token, err := p.StartPairing(ctx, ttl)
				if err != nil {
					return err
				}
				// From here on, leaving early ends the session.
				done := false
				defer cancelUnlessDone(ctx, p, &done)
				fmt.Fprintf(w, "pairing token: %s\n", token)
				fmt.Fprintf(w, "on the other host run:\n  agentmbx join %s %s\n", addr, token)
				fmt.Fprintln(cmd.ErrOrStderr(), "waiting for the other host to join…")
				st, err := p.WaitPairing(ctx, api.PairWaiting)
				if err != nil {
					return err
				}
				for st.State == api.PairJoining {
					if st, err = p.WaitPairing(ctx, api.PairJoining); err != nil {
						return err
					}
				}
				peer, err := confirmCode(ctx, cmd, p, st, yes)
				if err != nil {
					return err
				}
				done = true
				_, err = fmt.Fprintf(w, "pinned %s (%s)\n", peer.Host, peer.Fingerprint)
				return err
			})
		},
	}
	addHomeFlag(cmd, &home)
	cmd.Flags().DurationVar(&ttl, "ttl", 0, "how long the token is valid (default 10m)")
	cmd.Flags().StringVar(&listen, "listen", "", "without a daemon: the LAN address to serve the pairing on (default the host's)")
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "accept the code without asking")
	return cmd
}

func newJoinCmd() *cobra.Command {
	var (
		home string
		yes  bool
	)
	cmd := &cobra.Command{
		Use:   "join ADDR TOKEN [--yes]",
		Short: "Pair with the host that ran `agentmbx pair`, using its address and token",
		Long: `Join the pairing session that ` + "`agentmbx pair`" + ` opened on another host: ADDR is its LAN address
(host or host:port, default port 7373) and TOKEN the token it printed. Both hosts then show the
same 6-digit code: compare them and confirm on both sides.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := canConfirm(cmd, yes, pairYesHint); err != nil {
				return err
			}
			return withConn(cmd, home, func(ctx context.Context, c *conn) error {
				p := c.pairing()
				st, err := p.JoinPairing(ctx, args[0], args[1])
				var opErr *net.OpError
				if errors.As(err, &opErr) {
					return hint(err, "nothing answers at %s: is `agentmbx pair` still waiting there, and is this the address it printed?", args[0])
				}
				if err != nil {
					return err
				}
				done := false
				defer cancelUnlessDone(ctx, p, &done)
				peer, err := confirmCode(ctx, cmd, p, st, yes)
				if err != nil {
					return err
				}
				done = true
				_, err = fmt.Fprintf(cmd.OutOrStdout(), "pinned %s (%s)\n", peer.Host, peer.Fingerprint)
				return err
			})
		},
	}
	addHomeFlag(cmd, &home)
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "accept the code without asking")
	return cmd
}

// confirmCode shows the session's code and the other host, asks (unless yes) and gives the
// answer; it returns the pinned peer.
func confirmCode(ctx context.Context, cmd *cobra.Command, p api.PairingService, st api.PairingState, yes bool) (api.Peer, error) {
	if st.State != api.PairCode {
		if err := st.Err(); err != nil {
			return api.Peer{}, err
		}
		return api.Peer{}, fmt.Errorf("pairing ended in state %s", st.State)
	}
	w := cmd.OutOrStdout()
	fmt.Fprintf(w, "code: %s\n", st.Code)
	question := fmt.Sprintf("Does the other host show the code %s?", st.Code)
	if st.Peer != nil {
		fmt.Fprintf(w, "peer: %s (fingerprint %s)\n", st.Peer.Host, st.Peer.Fingerprint)
		question = fmt.Sprintf("Does %s show the code %s?", st.Peer.Host, st.Code)
	}
	if err := confirm(cmd, yes, false, question, pairYesHint); err != nil {
		if errors.Is(err, errDeclined) {
			p.ConfirmPairing(ctx, false)
		}
		return api.Peer{}, err
	}
	if !yes {
		fmt.Fprintln(cmd.ErrOrStderr(), "waiting for the other host to confirm…")
	}
	return p.ConfirmPairing(ctx, true)
}

// servePairLAN serves the host's LAN routes (the pairing ones among them) for a pairing session
// without a daemon. It returns a stop function and the address to tell the joiner.
func servePairLAN(h *host.Host, listen string) (stop func(), addr string, err error) {
	if listen == "" {
		listen = h.ListenAddr()
	}
	if listen == "" {
		listen = host.DefaultListen
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, "", hint(fmt.Errorf("pair: listen on %s: %w", listen, err),
			"is another program (a daemon of another home?) on that port? choose one with --listen")
	}
	// The same bounds as the daemon's LAN server: strangers reach this port before any pairing.
	srv := lan.NewHTTPServer(h.LANMux())
	go srv.Serve(lan.LimitListener(ln, lan.DefaultMaxConns, lan.DefaultMaxConnsPerAddr, nil))
	stop = func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	}
	return stop, joinAddr(ln.Addr().(*net.TCPAddr)), nil
}

// joinAddr is the address another machine dials to reach a listener bound at a: for an
// unspecified IP, this machine's first LAN address.
func joinAddr(a *net.TCPAddr) string {
	port := strconv.Itoa(a.Port)
	if !a.IP.IsUnspecified() {
		return net.JoinHostPort(a.IP.String(), port)
	}
	if ifs, err := net.InterfaceAddrs(); err == nil {
		for _, ia := range ifs {
			if n, ok := ia.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() && !n.IP.IsLinkLocalUnicast() {
				return net.JoinHostPort(n.IP.String(), port)
			}
		}
	}
	return net.JoinHostPort("127.0.0.1", port)
}

// stdinIsTerminal reports whether the command's standard input is a terminal.
func stdinIsTerminal(cmd *cobra.Command) bool {
	f, ok := cmd.InOrStdin().(*os.File)
	return ok && isTerminal(f)
}
