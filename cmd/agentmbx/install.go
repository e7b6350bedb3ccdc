package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/xml"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"text/template"

	"github.com/spf13/cobra"

	"github.com/agentmbx/agentmbx/host"
	"github.com/agentmbx/agentmbx/internal/shellquote"
)

// unitName and launchdLabel name the daemon's service for the default host home; another home's
// service carries the home's name and a hash of its path (serviceNames), so that two homes on one
// machine get two services.
const (
	unitName     = "agentmbx.service"
	launchdLabel = "com.agentmbx.daemon"
)

// serviceNames are the systemd unit and the launchd label of the daemon of home: the plain
// names for the default home (defaultHome), else with "-NAME-HASH" added, NAME the home's last
// path element made safe and HASH 8 hex characters of the SHA-256 of its absolute path.
func serviceNames(home, defaultHome string) (unit, label string) {
	if filepath.Clean(home) == filepath.Clean(defaultHome) {
		return unitName, launchdLabel
	}
	sum := sha256.Sum256([]byte(filepath.Clean(home)))
	name := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' {
			return r
		}
		if r >= 'A' && r <= 'Z' {
			return r + 'a' - 'A'
		}
		return '-'
	}, filepath.Base(home))
	name = strings.Trim(name, "-")
	if len(name) > 32 {
		name = name[:32]
	}
	suffix := hex.EncodeToString(sum[:4])
	if name != "" {
		suffix = name + "-" + suffix
	}
	return "agentmbx-" + suffix + ".service", launchdLabel + "." + suffix
}

// serviceSpec is what a daemon service file says.
type serviceSpec struct {
	OS   string // linux or darwin
	User bool   // a per-user service (systemd --user, a LaunchAgent); else a system one
	Bin  string // absolute path of the agentmbx binary
	Home string // the host home
	// Account runs a system service (systemd User=, launchd UserName).
	Account string
	// LogFile is where launchd sends the daemon's standard error.
	LogFile string
	// Unit and Label name the service (serviceNames); empty: unitName and launchdLabel.
	Unit, Label string
}

// UnitName is the systemd unit's file name.
func (s serviceSpec) UnitName() string {
	if s.Unit == "" {
		return unitName
	}
	return s.Unit
}

// LabelName is the launchd job's label.
func (s serviceSpec) LabelName() string {
	if s.Label == "" {
		return launchdLabel
	}
	return s.Label
}

// installPlan is what `daemon install` does: write Content to Path, then run Commands.
type installPlan struct {
	Path     string
	Content  []byte
	Commands [][]string
}

// systemdUnit is the daemon's systemd unit. A user unit runs in the user's manager; a system
// unit runs as Account and may write only the host home.
var systemdUnit = template.Must(template.New("unit").Funcs(template.FuncMap{"sd": systemdArg}).Parse(`# agentmbx host daemon{{if .User}}, a systemd user unit{{else}}, a systemd system unit{{end}}.
# Written by 'agentmbx daemon install{{if .User}} --user{{end}}'{{if .User}}; 'loginctl enable-linger' keeps it running
# without a login session{{end}}. Logs: journalctl {{if .User}}--user {{end}}-u {{.UnitName}}.
[Unit]
Description=agentmbx host daemon (mail between AI agents)
Documentation=https://github.com/agentmbx/agentmbx#readme
After=network-online.target
Wants=network-online.target

[Service]
Type=simple
ExecStart={{sd .Bin}} daemon --home {{sd .Home}} --log-format json
Restart=on-failure
RestartSec=5s
# SIGTERM stops it cleanly: in-flight deliveries finish, the store closes.
KillSignal=SIGTERM
TimeoutStopSec=30s
UMask=0077
NoNewPrivileges=yes
{{- if not .User}}
User={{.Account}}
PrivateTmp=yes
ProtectSystem=strict
ReadWritePaths={{sd .Home}}
ProtectKernelTunables=yes
ProtectKernelModules=yes
ProtectControlGroups=yes
RestrictSUIDSGID=yes
LockPersonality=yes
{{- end}}

[Install]
WantedBy={{if .User}}default.target{{else}}multi-user.target{{end}}
`))

// launchdPlist is the daemon's launchd job: a LaunchAgent (--user) or a LaunchDaemon run as
// Account.
var launchdPlist = template.Must(template.New("plist").Funcs(template.FuncMap{"x": xmlText}).Parse(`<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
<!-- agentmbx host daemon, a launchd {{if .User}}LaunchAgent{{else}}LaunchDaemon{{end}}, as 'agentmbx daemon install' writes it. -->
<plist version="1.0">
<dict>
	<key>Label</key>
	<string>{{x .LabelName}}</string>
	<key>ProgramArguments</key>
	<array>
		<string>{{x .Bin}}</string>
		<string>daemon</string>
		<string>--home</string>
		<string>{{x .Home}}</string>
		<string>--log-format</string>
		<string>json</string>
	</array>
{{- if not .User}}
	<key>UserName</key>
	<string>{{x .Account}}</string>
{{- end}}
	<key>RunAtLoad</key>
	<true/>
	<key>KeepAlive</key>
	<dict>
		<key>SuccessfulExit</key>
		<false/>
	</dict>
	<key>ProcessType</key>
	<string>Background</string>
	<key>ExitTimeOut</key>
	<integer>30</integer>
	<key>Umask</key>
	<integer>63</integer>
	<key>StandardErrorPath</key>
	<string>{{x .LogFile}}</string>
</dict>
</plist>
`))

// systemdArg quotes one ExecStart argument: % doubled (systemd specifiers), and double quotes
// around anything with a space, quote or backslash. A leading %h (the deploy file's home) stays
// a specifier.
func systemdArg(s string) string {
	spec := strings.HasPrefix(s, "%h/")
	if spec {
		s = s[2:]
	}
	s = strings.ReplaceAll(s, "%", "%%")
	if spec {
		s = "%h" + s
	}
	if strings.ContainsAny(s, " \t\"'\\") {
		s = `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
	}
	return s
}

func xmlText(s string) string {
	var b bytes.Buffer
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}

// plan returns what installing spec writes and runs; dir, when set, replaces the system's
// location of the file and nothing is run.
func plan(spec serviceSpec, userHome, dir string, uid int) (installPlan, error) {
	var p installPlan
	var buf bytes.Buffer
	switch spec.OS {
	case "linux":
		if err := systemdUnit.Execute(&buf, spec); err != nil {
			return p, err
		}
		p.Path = filepath.Join("/etc/systemd/system", spec.UnitName())
		sc := []string{"systemctl"}
		if spec.User {
			p.Path = filepath.Join(userHome, ".config/systemd/user", spec.UnitName())
			sc = append(sc, "--user")
		}
		p.Commands = [][]string{append(append([]string{}, sc...), "daemon-reload"),
			append(append([]string{}, sc...), "enable", "--now", spec.UnitName())}
	case "darwin":
		if err := launchdPlist.Execute(&buf, spec); err != nil {
			return p, err
		}
		domain := "system"
		p.Path = filepath.Join("/Library/LaunchDaemons", spec.LabelName()+".plist")
		if spec.User {
			domain = "gui/" + strconv.Itoa(uid)
			p.Path = filepath.Join(userHome, "Library/LaunchAgents", spec.LabelName()+".plist")
		}
		p.Commands = [][]string{{"launchctl", "bootstrap", domain, p.Path},
			{"launchctl", "enable", domain + "/" + spec.LabelName()}}
	default:
		return p, usageErr("daemon install knows linux (systemd) and darwin (launchd)", "daemon install: no service manager for %s", spec.OS)
	}
	p.Content = buf.Bytes()
	if dir != "" {
		p.Path = filepath.Join(dir, filepath.Base(p.Path))
		p.Commands = nil
	}
	return p, nil
}

func newDaemonInstallCmd() *cobra.Command {
	var (
		home, bin, dir, goos, runAs string
		asUser, dryRun              bool
	)
	cmd := &cobra.Command{
		Use:   "install [--user] [--run-as USER] [--dry-run] [--dir DIR] [--bin PATH]",
		Short: "Install the daemon as a service that starts at boot or login (systemd, launchd)",
		Long: `Write the daemon's service file for this system and enable it, printing what it did.

The service is named for the home: agentmbx.service (com.agentmbx.daemon on macOS) for the
default home, agentmbx-NAME-HASH.service (com.agentmbx.daemon.NAME-HASH) for any other, NAME the
home's directory name and HASH 8 hex characters of its path, so two homes on one machine get two
services.

Linux: a systemd unit; with --user a user unit in ~/.config/systemd/user, run by
'systemctl --user enable --now' (run 'loginctl enable-linger $USER' to keep it running while you
are logged out); without --user a system unit in /etc/systemd/system (needs root), hardened: it
may write only the host home. macOS: a launchd job; with --user a LaunchAgent in
~/Library/LaunchAgents, else a LaunchDaemon in /Library/LaunchDaemons (needs root), loaded with
'launchctl bootstrap'.

Who a system service runs as: --run-as USER if given; else, under sudo, the user who ran sudo
($SUDO_USER), with that user's default home; else you. It never runs as root unless you say
--run-as root, and then only a binary that no user but root can replace: the binary, every
directory above it and every symlink target must be owned by root and writable by no one else
(copy it, e.g. 'install -o root -m 0755 agentmbx /usr/local/bin/', and pass --bin).

The service runs this binary (or --bin) with this host home (--home, $MBX_HOME or the default)
and JSON logs. --dry-run prints the file and the commands without touching anything; --dir DIR
writes the file into DIR and runs nothing (to inspect it, or to package it).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			id, err := installIdentity()
			if err != nil {
				return err
			}
			spec, userHome, uid, err := installSpec(home, bin, goos, runAs, asUser, id)
			if err != nil {
				return err
			}
			p, err := plan(spec, userHome, dir, uid)
			if err != nil {
				return err
			}
			if !spec.User {
				fmt.Fprintf(cmd.OutOrStdout(), "the service runs as %s\n", spec.Account)
			}
			return runPlan(cmd.Context(), cmd.OutOrStdout(), p, dryRun)
		},
	}
	addHomeFlag(cmd, &home)
	cmd.Flags().BoolVar(&asUser, "user", false, "install a per-user service (systemd --user, a LaunchAgent) instead of a system one")
	cmd.Flags().StringVar(&runAs, "run-as", "", "the account a system service runs as (default: $SUDO_USER under sudo, else you; root only when named)")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "print the service file and the commands; change nothing")
	cmd.Flags().StringVar(&dir, "dir", "", "write the service file into this directory and run nothing")
	cmd.Flags().StringVar(&bin, "bin", "", "the agentmbx binary the service runs (default: this one)")
	cmd.Flags().StringVar(&goos, "os", runtime.GOOS, "the system to write for: linux or darwin")
	return cmd
}

// identity is who runs `daemon install`: the effective uid, the current account, sudo's
// $SUDO_USER, and how to look up accounts and files. Tests inject one (installIdentity) so that
// they behave the same run as root or not.
type identity struct {
	EUID     int
	Current  *user.User
	SudoUser string
	Lookup   func(name string) (*user.User, error)
	FS       ownerFS
	Getenv   func(string) string
}

// installIdentity returns the running process's identity; a variable so tests can replace it.
var installIdentity = func() (identity, error) {
	u, err := user.Current()
	if err != nil {
		return identity{}, fmt.Errorf("daemon install: current user: %w", err)
	}
	return identity{EUID: os.Geteuid(), Current: u, SudoUser: os.Getenv("SUDO_USER"),
		Lookup: user.Lookup, FS: osOwnerFS{}, Getenv: os.Getenv}, nil
}

// installSpec gathers the service's paths and account (see the command's help for the rules).
func installSpec(home, bin, goos, runAs string, asUser bool, id identity) (serviceSpec, string, int, error) {
	spec := serviceSpec{OS: goos, User: asUser}
	cur := id.Current
	sudoUser := id.SudoUser
	if sudoUser == "root" {
		sudoUser = ""
	}
	account := cur
	switch {
	case asUser && runAs != "":
		return spec, "", 0, usageErr("a --user service runs as the user whose manager runs it", "daemon install: --run-as is for a system service, not --user")
	case asUser && id.EUID == 0 && sudoUser != "":
		return spec, "", 0, usageErr("run it without sudo: 'agentmbx daemon install --user'",
			"daemon install: --user under sudo would install root's user service, not %s's", sudoUser)
	case asUser:
	case runAs != "":
		u, err := id.Lookup(runAs)
		if err != nil {
			return spec, "", 0, fmt.Errorf("daemon install: --run-as %s: %w", runAs, err)
		}
		account = u
	case id.EUID == 0 && sudoUser != "":
		u, err := id.Lookup(sudoUser)
		if err != nil {
			return spec, "", 0, fmt.Errorf("daemon install: SUDO_USER %s: %w", sudoUser, err)
		}
		account = u
	case id.EUID == 0 || cur.Uid == "0":
		return spec, "", 0, usageErr("name the account: --run-as USER (--run-as root to run it as root, from a root-owned binary)",
			"daemon install: not run through sudo and running as root: refusing to guess who the daemon runs as")
	}
	spec.Account = account.Username
	defaultHome := filepath.Join(account.HomeDir, ".local", "share", "agentmbx")
	var err error
	if home == "" && id.Getenv(host.EnvHome) == "" && account.Uid != cur.Uid {
		// Under sudo $HOME may be root's: the daemon's home is the account's own default.
		home = defaultHome
	}
	if spec.Home, err = host.ResolveHome(home); err != nil {
		return spec, "", 0, err
	}
	if spec.Home, err = filepath.Abs(spec.Home); err != nil {
		return spec, "", 0, err
	}
	if bin == "" {
		if bin, err = os.Executable(); err != nil {
			return spec, "", 0, fmt.Errorf("daemon install: this binary's path: %w (pass --bin)", err)
		}
		if resolved, err := filepath.EvalSymlinks(bin); err == nil {
			bin = resolved
		}
	}
	if spec.Bin, err = filepath.Abs(bin); err != nil {
		return spec, "", 0, err
	}
	if !asUser && account.Uid == "0" {
		if err := rootOnlyWritable(id.FS, spec.Bin); err != nil {
			return spec, "", 0, hint(fmt.Errorf("daemon install: a service that runs as root must run a binary only root can replace: %w", err),
				"copy it: 'install -o root -g 0 -m 0755 %s /usr/local/bin/agentmbx', then pass --bin /usr/local/bin/agentmbx; or run the service as a user (--run-as USER)", shellquote.Quote(spec.Bin))
		}
	}
	spec.LogFile = filepath.Join(spec.Home, "daemon.log")
	spec.Unit, spec.Label = serviceNames(spec.Home, defaultHome)
	uid, _ := strconv.Atoi(cur.Uid)
	return spec, cur.HomeDir, uid, nil
}

// runPlan writes the file and runs the commands (or, dry, prints them), saying what it did.
func runPlan(ctx context.Context, out io.Writer, p installPlan, dry bool) error {
	if dry {
		fmt.Fprintf(out, "would write %s:\n%s", p.Path, p.Content)
		for _, c := range p.Commands {
			fmt.Fprintf(out, "would run: %s\n", strings.Join(c, " "))
		}
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(p.Path), 0o755); err != nil {
		return fmt.Errorf("daemon install: %w", err)
	}
	if err := os.WriteFile(p.Path, p.Content, 0o644); err != nil {
		return fmt.Errorf("daemon install: %w", err)
	}
	fmt.Fprintf(out, "wrote %s\n", p.Path)
	if len(p.Commands) == 0 {
		fmt.Fprintln(out, "ran nothing (--dir)")
	}
	for _, c := range p.Commands {
		fmt.Fprintf(out, "running: %s\n", strings.Join(c, " "))
		run := exec.CommandContext(ctx, c[0], c[1:]...)
		run.Stdout, run.Stderr = out, out
		if err := run.Run(); err != nil {
			return hint(fmt.Errorf("daemon install: %s: %w", strings.Join(c, " "), err),
				"the file is written; fix the cause and run the command again")
		}
	}
	return nil
}
