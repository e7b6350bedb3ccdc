package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"

	"github.com/agentmbx/agentmbx/relayserver"
)

// railwayConfig is the part of Railway's config-as-code (railway.toml) the relay's file sets.
type railwayConfig struct {
	Build struct {
		Builder        string `toml:"builder"`
		DockerfilePath string `toml:"dockerfilePath"`
	} `toml:"build"`
	Deploy struct {
		StartCommand            string `toml:"startCommand"`
		HealthcheckPath         string `toml:"healthcheckPath"`
		HealthcheckTimeout      int    `toml:"healthcheckTimeout"`
		NumReplicas             int    `toml:"numReplicas"`
		OverlapSeconds          int    `toml:"overlapSeconds"`
		DrainingSeconds         int    `toml:"drainingSeconds"`
		RequiredMountPath       string `toml:"requiredMountPath"`
		RestartPolicyType       string `toml:"restartPolicyType"`
		RestartPolicyMaxRetries int    `toml:"restartPolicyMaxRetries"`
	} `toml:"deploy"`
}

// TestRailwayConfig: deploy/railway/railway.toml holds only keys Railway's config-as-code knows,
// builds the repository's Dockerfile, requires the volume where that image keeps the store,
// checks health on a route the relay serves, runs one replica without overlap (the store's lock),
// drains longer than the relay's shutdown, and starts a command line this binary takes, on the
// port the header tells the operator to set as PORT.
func TestRailwayConfig(t *testing.T) {
	var c railwayConfig
	md, err := toml.Decode(repoFile(t, "deploy/railway/railway.toml"), &c)
	if err != nil {
		t.Fatal(err)
	}
	if und := md.Undecoded(); len(und) > 0 {
		t.Fatalf("keys this test does not know (check them against Railway's config-as-code reference): %v", und)
	}
	if c.Build.Builder != "DOCKERFILE" {
		t.Errorf("builder %q", c.Build.Builder)
	}
	docker := repoFile(t, c.Build.DockerfilePath)
	m := regexp.MustCompile(`(?m)^ENV ` + relayserver.EnvRelayDir + `=(\S+)$`).FindStringSubmatch(docker)
	if m == nil || c.Deploy.RequiredMountPath != m[1] {
		t.Errorf("requiredMountPath %q is not the image's store directory %v", c.Deploy.RequiredMountPath, m)
	}
	if c.Deploy.HealthcheckPath != "/readyz" || c.Deploy.HealthcheckTimeout <= 0 {
		t.Errorf("health check %q (%d s)", c.Deploy.HealthcheckPath, c.Deploy.HealthcheckTimeout)
	}
	if c.Deploy.NumReplicas != 1 || c.Deploy.OverlapSeconds != 0 {
		t.Errorf("replicas %d, overlap %d: a SQLite store takes one relay at a time", c.Deploy.NumReplicas, c.Deploy.OverlapSeconds)
	}
	if c.Deploy.DrainingSeconds <= 10 {
		t.Errorf("drainingSeconds %d: the relay drains for up to 10 s", c.Deploy.DrainingSeconds)
	}
	if c.Deploy.RestartPolicyType != "ON_FAILURE" && c.Deploy.RestartPolicyType != "ALWAYS" {
		t.Errorf("restartPolicyType %q", c.Deploy.RestartPolicyType)
	}
	words := strings.Fields(c.Deploy.StartCommand)
	if len(words) < 3 || words[0] != "/usr/local/bin/agentmbx" || !strings.Contains(docker, "COPY --from=build /out/agentmbx "+words[0]) {
		t.Fatalf("startCommand %q does not run the image's binary", c.Deploy.StartCommand)
	}
	root := newRootCmd()
	cmd, rest, err := root.Find(words[1:])
	if err != nil || cmd.CommandPath() != "agentmbx relay serve" {
		t.Fatalf("startCommand runs %v (%v), want relay serve", cmd.CommandPath(), err)
	}
	if err := cmd.ParseFlags(rest); err != nil || len(cmd.Flags().Args()) != 0 {
		t.Fatalf("startCommand's flags: %v %v", err, cmd.Flags().Args())
	}
	listen, _ := cmd.Flags().GetString("listen")
	header := repoFile(t, "deploy/railway/railway.toml")
	if !strings.HasSuffix(listen, ":7374") || !strings.Contains(header, "PORT=7374") {
		t.Errorf("the relay listens on %q; the header must tell the operator to set PORT to that port", listen)
	}
	if dir, _ := cmd.Flags().GetString("backup-dir"); !strings.HasPrefix(dir, c.Deploy.RequiredMountPath+"/") {
		t.Errorf("backups go to %q, off the volume", dir)
	}
	for _, v := range []string{relayserver.EnvRelayKey, relayserver.EnvRelayTrustProxy, "RAILWAY_RUN_UID=0"} {
		if !strings.Contains(header, v) {
			t.Errorf("the header does not tell the operator to set %s", v)
		}
	}
	if _, err := os.Stat(filepath.Join("..", "..", "docs", "relay.md")); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(repoFile(t, "docs/relay.md"), "deploy/railway/railway.toml") {
		t.Error("docs/relay.md does not walk through deploy/railway/railway.toml")
	}
}
