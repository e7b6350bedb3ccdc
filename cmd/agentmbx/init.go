package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/agentmbx/agentmbx/host"
)

func newInitCmd() *cobra.Command {
	var home, name, listen string
	cmd := &cobra.Command{
		Use:   "init --host NAME [--listen ADDR]",
		Short: "Create this host: its keys and its store in the host home",
		Long: `Create this host: an Ed25519 host key and an X25519 enc key (host.key, enc.key, mode 0600)
and the store (state.db) in the host home (mode 0700). The host name is how peers address its
agents (name@host). init refuses a home that already has an identity.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			dir, err := host.ResolveHome(home)
			if err != nil {
				return err
			}
			if err := host.Init(dir, host.InitOptions{Host: name, Listen: listen}); err != nil {
				return explain(err)
			}
			h, err := host.Open(dir, &host.Options{Logger: cliLogger(cmd)})
			if err != nil {
				return explain(err)
			}
			defer h.Close()
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "created host %s in %s\n", h.Name(), dir)
			fmt.Fprintf(w, "fingerprint: %s\n", h.Key().Fingerprint())
			return nil
		},
	}
	addHomeFlag(cmd, &home)
	cmd.Flags().StringVar(&name, "host", "", "this host's name (letters, digits, . _ -)")
	cmd.Flags().StringVar(&listen, "listen", "", "LAN address the daemon listens on (default "+host.DefaultListen+")")
	cmd.MarkFlagRequired("host")
	return cmd
}
