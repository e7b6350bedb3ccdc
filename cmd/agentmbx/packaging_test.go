package main

import (
	"bytes"
	"context"
	"encoding/xml"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/agentmbx/agentmbx/internal/testkit"
)

// repoFile reads a file at the repository's root.
func repoFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// deploySpecs are the parameters the shipped daemon files are generated with.
var deploySpecs = map[string]serviceSpec{
	"deploy/systemd/agentmbx.service": {OS: "linux", User: true, Bin: "/usr/local/bin/agentmbx",
		Home: "%h/.local/share/agentmbx"},
	"deploy/launchd/com.agentmbx.daemon.plist": {OS: "darwin", User: true, Bin: "/usr/local/bin/agentmbx",
		Home: "/Users/YOU/.local/share/agentmbx", LogFile: "/Users/YOU/.local/share/agentmbx/daemon.log"},
}

// TestDeployDaemonFilesAreWhatInstallWrites: the shipped daemon units are the generator's output
// (MBX_UPDATE_DEPLOY=1 rewrites them).
func TestDeployDaemonFilesAreWhatInstallWrites(t *testing.T) {
	for name, spec := range deploySpecs {
		p, err := plan(spec, "/home/u", "", 501)
		if err != nil {
			t.Fatal(err)
		}
		if os.Getenv("MBX_UPDATE_DEPLOY") == "1" {
			if err := os.WriteFile(filepath.Join("..", "..", name), p.Content, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if got := repoFile(t, name); got != string(p.Content) {
			t.Errorf("%s differs from what daemon install writes (MBX_UPDATE_DEPLOY=1 go test -run %s):\n%s", name, t.Name(), p.Content)
		}
	}
}

// systemdVerify runs systemd-analyze verify on a unit (its ExecStart binary replaced by one that
// exists, as verify demands) and fails on any complaint. Without systemd-analyze it skips, but
// fails under CI, which installs it (.ci/run).
func systemdVerify(t *testing.T, name, unit string) {
	t.Helper()
	tool, err := exec.LookPath("systemd-analyze")
	if err != nil {
		testkit.SkipMissing(t, "systemd-analyze not installed: the units' syntax is not verified here")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	unit = strings.ReplaceAll(unit, "/usr/local/bin/agentmbx", systemdArg(exe))
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(unit), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(tool, "verify", path).CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Fatalf("systemd-analyze verify %s: %v\n%s\n%s", name, err, out, unit)
	}
}

func TestSystemdUnitsVerify(t *testing.T) {
	home := filepath.Join(t.TempDir(), "a home with 100% spaces")
	gen := func(user bool) string {
		p, err := plan(serviceSpec{OS: "linux", User: user, Bin: "/usr/local/bin/agentmbx", Home: home, Account: "root"}, "/root", "", 0)
		if err != nil {
			t.Fatal(err)
		}
		return string(p.Content)
	}
	for name, unit := range map[string]string{
		"agentmbx-relay.service":  repoFile(t, "deploy/systemd/agentmbx-relay.service"),
		"agentmbx.service":        repoFile(t, "deploy/systemd/agentmbx.service"),
		"agentmbx-user.service":   gen(true),
		"agentmbx-system.service": gen(false),
	} {
		t.Run(name, func(t *testing.T) { systemdVerify(t, name, unit) })
	}
}

// TestRelayUnitIsHardened checks the relay unit's hardening and what it runs.
func TestRelayUnitIsHardened(t *testing.T) {
	unit := repoFile(t, "deploy/systemd/agentmbx-relay.service")
	for _, want := range []string{"DynamicUser=yes", "StateDirectory=agentmbx-relay", "ProtectSystem=strict",
		"NoNewPrivileges=yes", "ProtectHome=yes", "PrivateTmp=yes", "CapabilityBoundingSet=\n",
		"RestrictAddressFamilies=", "SystemCallFilter=@system-service", "UMask=0077", "KillSignal=SIGTERM",
		"ExecStart=/usr/local/bin/agentmbx relay serve --store-dir %S/agentmbx-relay", "--log-format json",
		"--metrics-listen 127.0.0.1:"} {
		if !strings.Contains(unit, want) {
			t.Errorf("the relay unit lacks %q", want)
		}
	}
}

// plist is the shape of a launchd job, as far as the tests look.
type plist struct {
	Dict struct {
		Items []struct {
			XMLName xml.Name
			Value   string   `xml:",chardata"`
			Strings []string `xml:"string"`
		} `xml:",any"`
	} `xml:"dict"`
}

// plistKeys maps each key of a plist's top dict to its value (a string, or the strings of an
// array, joined by spaces; "true"/"false" for booleans).
func plistKeys(t *testing.T, doc string) map[string]string {
	t.Helper()
	var p plist
	if err := xml.Unmarshal([]byte(doc), &p); err != nil {
		t.Fatalf("the plist does not parse: %v", err)
	}
	m := map[string]string{}
	items := p.Dict.Items
	for i := 0; i+1 < len(items); i += 2 {
		if items[i].XMLName.Local != "key" {
			t.Fatalf("plist item %d is %s, want a key", i, items[i].XMLName.Local)
		}
		v := items[i+1]
		switch v.XMLName.Local {
		case "array":
			m[items[i].Value] = strings.Join(v.Strings, " ")
		case "true", "false":
			m[items[i].Value] = v.XMLName.Local
		default:
			m[items[i].Value] = strings.TrimSpace(v.Value)
		}
	}
	return m
}

func TestLaunchdPlists(t *testing.T) {
	m := plistKeys(t, repoFile(t, "deploy/launchd/com.agentmbx.daemon.plist"))
	want := map[string]string{"Label": launchdLabel, "RunAtLoad": "true", "ProcessType": "Background",
		"ProgramArguments": "/usr/local/bin/agentmbx daemon --home /Users/YOU/.local/share/agentmbx --log-format json"}
	for k, v := range want {
		if m[k] != v {
			t.Errorf("plist %s = %q, want %q", k, m[k], v)
		}
	}
	if _, ok := m["UserName"]; ok {
		t.Error("the LaunchAgent names a UserName")
	}
	// A system job with awkward paths: escaped, and run as the account.
	p, err := plan(serviceSpec{OS: "darwin", Bin: "/opt/a&b/agentmbx", Home: "/Users/x/<h>", Account: "x",
		LogFile: "/Users/x/<h>/daemon.log"}, "/Users/x", "", 501)
	if err != nil {
		t.Fatal(err)
	}
	m = plistKeys(t, string(p.Content))
	if m["ProgramArguments"] != "/opt/a&b/agentmbx daemon --home /Users/x/<h> --log-format json" || m["UserName"] != "x" {
		t.Errorf("system plist = %v", m)
	}
	if p.Path != "/Library/LaunchDaemons/com.agentmbx.daemon.plist" || strings.Join(p.Commands[0], " ") != "launchctl bootstrap system "+p.Path {
		t.Errorf("system plist plan = %s %v", p.Path, p.Commands)
	}
}

// runMain runs the agentmbx command line in process.
func runMain(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := Main(context.Background(), args, strings.NewReader(""), &out, &errOut)
	return out.String() + errOut.String(), err
}

// TestDaemonInstall: --dir writes the unit there and runs nothing; --dry-run prints the unit and
// the systemctl commands and writes nothing; both name this host's home and the given binary.
func TestDaemonInstall(t *testing.T) {
	withIdentity(t, identity{EUID: 1000, Current: aliceUser})
	dir, home := t.TempDir(), filepath.Join(t.TempDir(), "home")
	out, err := runMain(t, "daemon", "install", "--user", "--os", "linux", "--dir", dir, "--home", home, "--bin", "/opt/agentmbx")
	if err != nil {
		t.Fatalf("daemon install --dir: %v\n%s", err, out)
	}
	unit, _ := serviceNames(home, "/nonexistent/default")
	b, err := os.ReadFile(filepath.Join(dir, unit))
	if err != nil {
		t.Fatalf("no unit in --dir: %v\n%s", err, out)
	}
	if !strings.Contains(string(b), "ExecStart=/opt/agentmbx daemon --home "+home+" --log-format json\n") ||
		!strings.Contains(string(b), "WantedBy=default.target") {
		t.Fatalf("unit:\n%s", b)
	}
	if !strings.Contains(out, "wrote "+filepath.Join(dir, unit)) || !strings.Contains(out, "ran nothing") {
		t.Fatalf("install said:\n%s", out)
	}

	out, err = runMain(t, "daemon", "install", "--os", "linux", "--dry-run", "--home", home, "--bin", "/opt/agentmbx")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"would write /etc/systemd/system/" + unit + ":", "ReadWritePaths=" + home, "\nUser=alice\n",
		"ProtectSystem=strict", "would run: systemctl daemon-reload", "would run: systemctl enable --now " + unit} {
		if !strings.Contains(out, want) {
			t.Errorf("dry run lacks %q:\n%s", want, out)
		}
	}
	if _, err := os.Stat("/etc/systemd/system/agentmbx.service"); err == nil {
		t.Log("note: /etc/systemd/system/agentmbx.service exists on this machine (not written by this test)")
	}
	if _, err := runMain(t, "daemon", "install", "--os", "plan9", "--dry-run", "--home", home); err == nil {
		t.Fatal("install for plan9 succeeded")
	}
}

// TestDockerfile checks what the relay image promises; with MBX_DOCKERFILE_BUILD=1 (CI) it also
// runs the build command of its build stage (docker itself is not available to the tests).
func TestDockerfile(t *testing.T) {
	df := repoFile(t, "Dockerfile")
	for _, re := range []string{
		`(?m)^FROM golang:1\.\d+\S* AS build$`,
		`(?m)^RUN CGO_ENABLED=0 go build -trimpath .* -o /out/agentmbx ./cmd/agentmbx$`,
		`(?m)^FROM gcr\.io/distroless/static\S*:nonroot$`,
		`(?m)^USER 65532:65532$`,
		`(?m)^VOLUME /data$`,
		`(?m)^ENV MBX_RELAY_DIR=/data$`,
		`(?m)^HEALTHCHECK .*\n\s+CMD \["/usr/local/bin/agentmbx", "relay", "healthcheck", "--url", "http://127\.0\.0\.1:7374/healthz"\]$`,
		`(?m)^ENTRYPOINT \["/usr/local/bin/agentmbx", "relay", "serve"\]$`,
		`MBX_RELAY_KEY_FILE=/run/secrets/mbx_relay_key`,
	} {
		if !regexp.MustCompile(re).MatchString(df) {
			t.Errorf("the Dockerfile does not match %s", re)
		}
	}
	if os.Getenv("MBX_DOCKERFILE_BUILD") != "1" {
		testkit.SkipMissing(t, "MBX_DOCKERFILE_BUILD=1 runs the build stage's go build (CI does)")
	}
	line := regexp.MustCompile(`(?m)^RUN (CGO_ENABLED=0 go build .*)$`).FindStringSubmatch(df)[1]
	out := filepath.Join(t.TempDir(), "agentmbx")
	line = strings.ReplaceAll(strings.ReplaceAll(line, "/out/agentmbx", out), "${VERSION}", "test")
	cmd := exec.Command("sh", "-c", line)
	cmd.Dir = filepath.Join("..", "..")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", line, err, b)
	}
	v, err := exec.Command(out, "version").CombinedOutput()
	if err != nil || !strings.Contains(string(v), "test") {
		t.Fatalf("the built binary says %s, %v", v, err)
	}
}

// TestRelayHealthcheckAndKeyFile: the container's health check command against a real relay
// serving with its key from MBX_RELAY_KEY_FILE.
func TestRelayHealthcheckAndKeyFile(t *testing.T) {
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "relay-key")
	if _, err := runMain(t, "relay", "healthcheck", "--url", "http://127.0.0.1:1/healthz", "--timeout", "2s"); err == nil {
		t.Fatal("healthcheck of nothing succeeded")
	}
	seed, err := runRelayOut(t, "keygen")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, []byte(seed), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("MBX_RELAY_KEY", "")
	t.Setenv(envRelayKeyFile, filepath.Join(dir, "missing"))
	if _, _, err := runRelay(t, "serve", "--store-dir", filepath.Join(dir, "store")); err == nil || !strings.Contains(err.Error(), envRelayKeyFile) {
		t.Fatalf("serve with a missing key file = %v", err)
	}
	t.Setenv(envRelayKeyFile, keyFile)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addrFile := filepath.Join(dir, "addr")
	cmd := newRelayCmd()
	cmd.SetArgs([]string{"serve", "--store-dir", filepath.Join(dir, "store"), "--listen", "127.0.0.1:0", "--addr-file", addrFile})
	cmd.SetOut(io.Discard)
	cmd.SetErr(io.Discard)
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()
	addr := waitFile(t, addrFile, done)
	if out, err := runMain(t, "relay", "healthcheck", "--url", "http://"+addr+"/healthz"); err != nil || strings.TrimSpace(out) != "ok" {
		t.Fatalf("healthcheck = %q, %v", out, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "store", "relay.key")); err == nil {
		t.Fatal("the relay made relay.key although MBX_RELAY_KEY_FILE gave it a key")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// runRelayOut runs `agentmbx relay args...` and returns its standard output.
func runRelayOut(t *testing.T, args ...string) (string, error) {
	out, _, err := runRelay(t, args...)
	return out, err
}

// TestCompletions: cobra's completion scripts, as the README documents them.
func TestCompletions(t *testing.T) {
	for shell, want := range map[string]string{"bash": "__start_agentmbx", "zsh": "#compdef agentmbx",
		"fish": "complete -c agentmbx", "powershell": "Register-ArgumentCompleter"} {
		out, err := runMain(t, "completion", shell)
		if err != nil || !strings.Contains(out, want) {
			t.Errorf("completion %s: %v, lacks %q", shell, err, want)
		}
	}
}

// TestServiceNamesPerHome: the default home's service keeps the plain names; two other homes get
// two names, each with the home's directory name and a hash of its path, stable across calls.
func TestServiceNamesPerHome(t *testing.T) {
	def := "/home/u/.local/share/agentmbx"
	if u, l := serviceNames(def, def); u != unitName || l != launchdLabel {
		t.Errorf("default home: %s %s", u, l)
	}
	u1, l1 := serviceNames("/home/u/work", def)
	u2, l2 := serviceNames("/srv/other/work", def)
	u3, _ := serviceNames("/home/u/Wörk Home!", def)
	if u1 == u2 || l1 == l2 || !strings.HasPrefix(u1, "agentmbx-work-") || !strings.HasSuffix(u1, ".service") ||
		!strings.HasPrefix(l1, launchdLabel+".work-") || len(u1) != len("agentmbx-work-12345678.service") {
		t.Errorf("names: %s %s, %s %s", u1, l1, u2, l2)
	}
	if again, _ := serviceNames("/home/u/work/", def); again != u1 {
		t.Errorf("the same home named twice: %s, %s", u1, again)
	}
	if !regexp.MustCompile(`^agentmbx-[a-z0-9-]+-[0-9a-f]{8}\.service$`).MatchString(u3) {
		t.Errorf("awkward home name: %s", u3)
	}
	// Two homes installed side by side write two files and enable two units.
	dir := t.TempDir()
	for _, h := range []string{filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b")} {
		if out, err := runMain(t, "daemon", "install", "--user", "--os", "linux", "--dir", dir, "--home", h, "--bin", "/opt/agentmbx"); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 2 {
		t.Fatalf("two homes wrote %d unit files", len(ents))
	}
}
