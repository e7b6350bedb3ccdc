package main

import (
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentmbx/agentmbx/host"
)

func newDaemonCmd() *cobra.Command {
	var (
		home, listen, addrFile         string
		metricsListen, metricsAddrFile string
		tick                           time.Duration
		lf                             logFlags
	)
	cmd := &cobra.Command{
		Use:   "daemon [--listen ADDR] [--tick DURATION] [--addr-file FILE]",
		Short: "Run the host: the LAN server, the delivery loops and the control socket",
		Long: `Run the host daemon in the foreground: it serves the LAN protocol to paired hosts, delivers
the outbox and sends delivery receipts, and serves the control socket in the host home that every
other command (and the client SDK) uses while it runs. SIGTERM or Ctrl-C stops it cleanly; a
message whose send was answered survives even a SIGKILL.

--listen overrides the address given at init (default ` + host.DefaultListen + `; port 0 picks a free
one); --addr-file writes the bound address there once the daemon serves, for scripts and tests.
--log-format json writes one JSON object a line. 'agentmbx daemon install' makes it a service.

Health: GET /healthz and /readyz (the daemon serves and its store takes writes) answer on the
control socket and, with --metrics-listen ADDR, on a private TCP listener that also serves
Prometheus metrics at /metrics (agentmbx_daemon_*: outbox rows by state, the oldest pending age,
deliveries by transport, quarantine size, the relay link's state, receipts applied).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			dir, err := host.ResolveHome(home)
			if err != nil {
				return err
			}
			if tick < 0 {
				return usageErr("give a positive duration like 1s", "daemon: negative --tick")
			}
			logger, err := lf.logger(cmd.ErrOrStderr(), "daemon")
			if err != nil {
				return err
			}
			// The daemon stops on SIGTERM and Ctrl-C whoever runs it.
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			met := &daemonMetrics{listen: metricsListen, addrFile: metricsAddrFile, log: logger}
			err = host.RunDaemon(ctx, dir, host.DaemonOptions{Listen: listen, Tick: tick, AddrFile: addrFile,
				Options: &host.Options{Logger: logger}, Ready: met.start})
			if merr := met.stop(); err == nil {
				err = merr
			}
			return explain(err)
		},
	}
	addHomeFlag(cmd, &home)
	cmd.Flags().StringVar(&listen, "listen", "", "LAN listen address (default: the one given at init, else "+host.DefaultListen+")")
	cmd.Flags().DurationVar(&tick, "tick", 0, "how often the delivery loops look for due work (default: the host's)")
	cmd.Flags().StringVar(&addrFile, "addr-file", "", "write the bound LAN address to this file once serving")
	cmd.Flags().StringVar(&metricsListen, "metrics-listen", "", "serve /metrics, /healthz and /readyz on this private address (default: off)")
	cmd.Flags().StringVar(&metricsAddrFile, "metrics-addr-file", "", "write the metrics listener's bound host:port to this file")
	addLogFlags(cmd, &lf)
	cmd.AddCommand(newDaemonInstallCmd(), newDaemonStopCmd(), newDaemonStatusCmd())
	return cmd
}
