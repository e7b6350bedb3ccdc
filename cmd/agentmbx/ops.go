package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentmbx/agentmbx/relayserver"
)

// envRelayKeyFile names a file holding the relay key (a Docker secret, a systemd credential):
// read when MBX_RELAY_KEY itself is not set.
const envRelayKeyFile = "MBX_RELAY_KEY_FILE"

// relayKeyEnv is `relay serve`'s environment: MBX_RELAY_KEY, else the content of the file
// MBX_RELAY_KEY_FILE names. A named file that cannot be read is an error, never a silent fallback
// to relay.key.
func relayKeyEnv() (func(string) string, error) {
	if os.Getenv(relayserver.EnvRelayKey) != "" || os.Getenv(envRelayKeyFile) == "" {
		return os.Getenv, nil
	}
	path := os.Getenv(envRelayKeyFile)
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, hint(fmt.Errorf("relay serve: %s: %w", envRelayKeyFile, err),
			"mount the secret there, or unset %s to use relay.key in the store directory", envRelayKeyFile)
	}
	key := strings.TrimSpace(string(b))
	return func(name string) string {
		if name == relayserver.EnvRelayKey {
			return key
		}
		return os.Getenv(name)
	}, nil
}

// newRelayHealthcheckCmd is the container's HEALTHCHECK: the image has no shell or curl.
func newRelayHealthcheckCmd() *cobra.Command {
	var url string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "healthcheck [--url URL]",
		Short: "Exit 0 when a relay's /healthz answers 200 (for container health checks)",
		Long: `GET the URL (default http://127.0.0.1:7374/healthz) and exit 0 when it answers 200, else 1.
Point it at /readyz to check readiness instead (the store takes writes, the heartbeat is fresh).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			if err != nil {
				return usageErr("pass an http URL", "relay healthcheck: %v", err)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return fmt.Errorf("relay healthcheck: %w", err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("relay healthcheck: %s answered %s", url, resp.Status)
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), "ok")
			return err
		},
	}
	cmd.Flags().StringVar(&url, "url", "http://127.0.0.1:7374/healthz", "the health URL to check")
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Second, "give up after this long")
	return cmd
}
