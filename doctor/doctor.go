package doctor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/internal/fsutil"
	"github.com/agentmbx/agentmbx/internal/shellquote"
	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/relayclient"
)

// File names in the host home that doctor reads (the host's) or writes (MarkerFile).
const (
	HostKeyFile = "host.key"
	EncKeyFile  = "enc.key"
	StateFile   = "state.db"
	// MarkerFile holds the time of the last doctor run ({"at": ISO time}).
	MarkerFile = "doctor.json"
)

// Env is what Run checks: a host home and the host reached in it.
type Env struct {
	// Home is the host home directory.
	Home string
	// HomeFlag is the --home the command was given ("" for none): every fix that is a host
	// command carries it, so that the fix acts on this home when pasted.
	HomeFlag string
	// Host is the host: the daemon's over its socket, or the store opened by this process. Nil
	// when it could not be reached; OpenErr says why.
	Host    api.Service
	Relay   api.RelayService
	OpenErr error
	// Daemon says Host is a running daemon, answering on its control socket.
	Daemon bool
	// Version is this binary's version (internal/version), compared with the daemon's.
	Version string
	// Now is the clock (default time.Now).
	Now func() time.Time
	// HTTPClient probes peers over the LAN (default: one with a 5 s timeout).
	HTTPClient *http.Client
	// RelayHTTPClient, when set, sends the relay probe (tests); else relayclient's own, which
	// trusts the CA pinned with the relay.
	RelayHTTPClient *http.Client
	// RelayTimeout bounds the relay probe (default 10 s).
	RelayTimeout time.Duration
	// NoMarker leaves the last-doctor marker alone (neither read nor written).
	NoMarker bool
}

// Run runs every check and returns the report; a failed check makes Report.OK false. It then
// records the time of this run in the home's MarkerFile (unless NoMarker).
func Run(ctx context.Context, env Env) Report {
	if env.Now == nil {
		env.Now = time.Now
	}
	if env.HTTPClient == nil {
		env.HTTPClient = &http.Client{Timeout: 5 * time.Second,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	if env.RelayTimeout <= 0 {
		env.RelayTimeout = 10 * time.Second
	}
	r := &Report{OK: true}
	st, ok := checkHost(ctx, env, r)
	if !ok {
		return *r
	}
	checkModes(env, r)
	checkDaemon(env, st, r)
	checkRotation(env, st, r)
	var last time.Time
	if !env.NoMarker {
		last = readMarker(env.Home)
	}
	rs, err := env.Relay.RelayStatus(ctx)
	if err != nil {
		r.add(Check{ID: "relay", Status: Fail, Summary: "relay status unreadable: " + err.Error()})
	}
	checkAgents(ctx, env, r)
	checkPeers(ctx, env, rs, r)
	checkLANAlerts(env, st, r)
	checkRelay(ctx, env, rs, r)
	checkOutbox(ctx, env, last, r)
	checkQuarantine(env, rs, r)
	if !env.NoMarker {
		if err := writeMarker(env.Home, env.Now()); err != nil {
			r.add(Check{ID: "doctor.marker", Status: Warn, Summary: "could not record this run: " + err.Error(),
				Detail: "the next doctor reports ended rows since an older run"})
		}
	}
	return *r
}

// checkHost: the host is initialised and answers. It reports whether the other checks can run.
func checkHost(ctx context.Context, env Env, r *Report) (api.Status, bool) {
	if _, err := os.Stat(filepath.Join(env.Home, HostKeyFile)); errors.Is(err, fs.ErrNotExist) {
		r.add(Check{ID: "host", Status: Fail, Summary: "no host in " + env.Home,
			Detail: "there is no " + HostKeyFile + " in the home directory",
			Fix:    env.command("init", "--host", filepath.Base(env.Home))})
		return api.Status{}, false
	}
	if env.Host == nil {
		msg := "the host cannot be opened"
		if env.OpenErr != nil {
			msg += ": " + env.OpenErr.Error()
		}
		r.add(Check{ID: "host", Status: Fail, Summary: msg, Detail: "home " + env.Home})
		return api.Status{}, false
	}
	st, err := env.Host.Status(ctx)
	if err != nil {
		r.add(Check{ID: "host", Status: Fail, Summary: "host status: " + err.Error(), Detail: "home " + env.Home})
		return api.Status{}, false
	}
	r.add(Check{ID: "host", Status: OK, Summary: fmt.Sprintf("%s, key %s", st.Host, st.Fingerprint),
		Detail: "home " + env.Home})
	return st, true
}

// checkModes: the home is 0700 and the key files 0600 (nobody else can read them).
func checkModes(env Env, r *Report) {
	var bad []string
	want := []struct {
		name string
		max  fs.FileMode
	}{{"", 0o700}, {HostKeyFile, 0o600}, {EncKeyFile, 0o600}, {StateFile, 0o600}}
	for _, w := range want {
		p := filepath.Join(env.Home, w.name)
		fi, err := os.Stat(p)
		if err != nil {
			if w.name != StateFile || !errors.Is(err, fs.ErrNotExist) {
				bad = append(bad, fmt.Sprintf("%s: %v", p, err))
			}
			continue
		}
		if m := fi.Mode().Perm(); m&^w.max != 0 {
			bad = append(bad, fmt.Sprintf("%s is %04o, want %04o", p, m, w.max))
		}
	}
	if len(bad) > 0 {
		r.add(Check{ID: "home.modes", Status: Fail, Summary: "others can read the host's files",
			Detail: strings.Join(bad, "\n"),
			Fix: "chmod 700 " + shellquote.Quote(env.Home) + " && chmod 600 " + shellquote.Join(filepath.Join(env.Home, HostKeyFile),
				filepath.Join(env.Home, EncKeyFile), filepath.Join(env.Home, StateFile))})
		return
	}
	r.add(Check{ID: "home.modes", Status: OK, Summary: "home 0700, keys and store 0600"})
}

// checkDaemon: the daemon runs and answers on its socket, with this binary's version.
func checkDaemon(env Env, st api.Status, r *Report) {
	sock := filepath.Join(env.Home, api.SocketName)
	if !env.Daemon {
		r.add(Check{ID: "daemon", Status: Warn, Summary: "not running: no mail leaves or arrives until it does",
			Detail: "no answer on " + sock + "; the checks below read the store directly",
			Fix:    env.command("daemon")})
		return
	}
	r.add(Check{ID: "daemon", Status: OK, Summary: "running, answering on " + sock})
	checkLANListener(env, st, r)
	checkReach(st, r)
	switch {
	case st.Version == "":
		r.add(Check{ID: "daemon.version", Status: Warn, Summary: "the daemon does not say its version (an older build)",
			Detail: "this binary is " + env.Version + "; restart the daemon with this binary", Fix: env.restartDaemon()})
	case st.Version != env.Version:
		r.add(Check{ID: "daemon.version", Status: Warn, Summary: fmt.Sprintf("the daemon runs %s, this binary is %s", st.Version, env.Version),
			Detail: "restart the daemon with this binary", Fix: env.restartDaemon()})
	default:
		r.add(Check{ID: "daemon.version", Status: OK, Summary: "same build as this binary: " + st.Version})
	}
}

// checkReach: the targets the daemon finds silent (the relay, peers' LAN addresses). Mail for
// them waits; the daemon probes them every 5 s and sends it when they answer.
func checkReach(st api.Status, r *Report) {
	for _, t := range st.Reach {
		if t.State != "down" {
			continue
		}
		what := t.Target
		if host, ok := strings.CutPrefix(t.Target, "lan:"); ok {
			what = host + "'s LAN address"
		}
		r.add(Check{ID: "daemon.reach", Status: Warn, Summary: what + " does not answer since " + orText(t.OutageSince, t.Since),
			Detail: "the daemon probes it every 5 s; the mail waiting for it goes as soon as it answers"})
	}
}

// checkLANListener: the daemon listens on the LAN, or says why its bind failed (it retries it
// with backoff and serves local and relay mail meanwhile).
func checkLANListener(env Env, st api.Status, r *Report) {
	if st.LANError != "" {
		r.add(Check{ID: "daemon.lan", Status: Warn, Summary: "LAN listener not bound: peers cannot reach this host over the LAN",
			Detail: st.LANError + "\nthe daemon retries the bind with backoff; local and relay mail go on meanwhile\n" +
				"free the port " + orText(st.Listen, "(see status)") + ", or restart the daemon with another address (daemon --listen HOST:PORT)"})
		return
	}
	r.add(Check{ID: "daemon.lan", Status: OK, Summary: "LAN listener on " + orText(st.Listen, "-")})
}

// marker is MarkerFile's content.
type marker struct {
	At string `json:"at"`
}

func readMarker(home string) time.Time {
	b, err := os.ReadFile(filepath.Join(home, MarkerFile))
	if err != nil {
		return time.Time{}
	}
	var m marker
	if json.Unmarshal(b, &m) != nil {
		return time.Time{}
	}
	t, err := mbx.ParseISOTime(m.At)
	if err != nil {
		return time.Time{}
	}
	return t
}

func writeMarker(home string, now time.Time) error {
	b, err := json.Marshal(marker{At: mbx.ISOTime(now)})
	if err != nil {
		return err
	}
	return fsutil.WriteFileAtomic(filepath.Join(home, MarkerFile), append(b, '\n'), 0o600)
}

// relayOptions are the relay client options of the relay pinned as rs.
func relayOptions(env Env, rs api.RelayStatus) *relayclient.Options {
	return &relayclient.Options{CA: []byte(rs.CA), Timeout: env.RelayTimeout, Clock: env.Now, HTTPClient: env.RelayHTTPClient}
}

// checkAgents: agents that incoming mail created (nobody registered the name here) are shown, as
// a sender's typo would be: the mail waits in a mailbox nobody reads.
func checkAgents(ctx context.Context, env Env, r *Report) {
	as, err := env.Host.Agents(ctx)
	if err != nil {
		r.add(Check{ID: "agents", Status: Fail, Summary: "agents unreadable: " + err.Error()})
		return
	}
	var created []string
	firstCreated := ""
	for _, a := range as {
		if a.CreatedByMail != "" && firstCreated == "" {
			firstCreated = a.Name
		}
		if a.CreatedByMail != "" {
			created = append(created, a.Name+" (by mail from "+a.CreatedByMail+")")
		}
	}
	if len(created) == 0 {
		r.add(Check{ID: "agents", Status: OK, Summary: fmt.Sprintf("%s, none created by incoming mail", count(len(as), "agent", "agents"))})
		return
	}
	r.add(Check{ID: "agents", Status: Warn,
		Summary: fmt.Sprintf("%s created by incoming mail: %s", count(len(created), "agent", "agents"), strings.Join(created, ", ")),
		Detail: "no one registered these names here; their mail is kept in new mailboxes (a sender's typo, or a new agent)\n" +
			"keep one with `agentmbx agents add NAME`; else tell the sender the right address",
		Fix: env.command("agents", "add", firstCreated)})
}

// count is "1 agent", "2 agents".
func count(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// command is an agentmbx host command for a fix: the words quoted for the shell, with --home
// when the doctor was given one, so that it acts on this home when pasted.
func (e Env) command(words ...string) string {
	if e.HomeFlag != "" {
		words = append(words, "--home", e.HomeFlag)
	}
	return "agentmbx " + shellquote.Join(words...)
}

// restartDaemon is the fix that restarts the daemon of this home.
func (e Env) restartDaemon() string {
	return e.command("daemon", "stop") + " && " + e.command("daemon")
}
