package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/internal/oracle"
)

// stopWait bounds a child's clean stop.
const stopWait = 20 * time.Second

var fingerprintLine = regexp.MustCompile(`(?m)^relay key fingerprint: ([0-9a-f-]{19})\b`)

// startRelay: `relay keygen`, then `relay serve` with that key on a free loopback port.
func (d *run) startRelay(ctx context.Context) error {
	r, err := d.exec(ctx, "", "relay", "keygen")
	if err != nil || r.code != 0 {
		return fmt.Errorf("relay keygen: exit %d %v", r.code, err)
	}
	d.seed = strings.TrimSpace(r.stdout)
	m := fingerprintLine.FindStringSubmatch(r.stderr)
	if m == nil {
		return fmt.Errorf("relay keygen printed no fingerprint: %q", r.stderr)
	}
	d.fp = m[1]
	d.relayDir = filepath.Join(d.dir, "relay")
	addr, err := d.serveRelay(ctx, "127.0.0.1:0")
	if err != nil {
		return err
	}
	d.relayURL = "http://" + addr
	d.detail(fmt.Sprintf("agentmbx relay keygen          → key fingerprint %s\nMBX_RELAY_KEY=… agentmbx relay serve --store-dir %s --listen %s", d.fp, d.relayDir, addr))
	return nil
}

// serveRelay starts `relay serve` on listen and checks it announces the keygen fingerprint.
func (d *run) serveRelay(ctx context.Context, listen string) (string, error) {
	addrFile := filepath.Join(d.dir, "relay.addr")
	os.Remove(addrFile)
	p, err := d.start("relay", []string{"MBX_RELAY_KEY=" + d.seed},
		"relay", "serve", "--store-dir", d.relayDir, "--listen", listen, "--addr-file", addrFile)
	if err != nil {
		return "", err
	}
	d.relay = p
	addr, err := waitAddr(ctx, p, addrFile)
	if err != nil {
		return "", err
	}
	if m := fingerprintLine.FindStringSubmatch(p.log.String()); m == nil || m[1] != d.fp {
		return "", fmt.Errorf("relay serve did not announce the keygen key %s:\n%s", d.fp, p.log.String())
	}
	return addr, nil
}

// createHosts: `init` two homes, register an agent on each, and pin each host's card on the
// other. The cards carry no LAN address, so everything goes through the relay.
func (d *run) createHosts(ctx context.Context) error {
	for _, h := range []*hostProc{{name: "home", agent: "alice"}, {name: "work", agent: "bob"}} {
		h.home = filepath.Join(d.dir, h.name)
		if _, err := d.must(ctx, "init", "--home", h.home, "--host", h.name, "--listen", "127.0.0.1:0"); err != nil {
			return err
		}
		if _, err := d.must(ctx, "agents", "add", h.agent, "--home", h.home); err != nil {
			return err
		}
		d.hosts[h.name] = h
	}
	home, work := d.hosts["home"], d.hosts["work"]
	for _, pair := range [][2]*hostProc{{home, work}, {work, home}} {
		card, err := d.must(ctx, "id", "--card", "--home", pair[0].home)
		if err != nil {
			return err
		}
		if _, err := d.mustIn(ctx, card, "peers", "add", "-", "--yes", "--home", pair[1].home); err != nil {
			return err
		}
	}
	d.detail("agentmbx init --host home; agentmbx init --host work\nagentmbx id --card (no --addr: no LAN route) | agentmbx peers add - --yes, both ways")
	return nil
}

// pinAndStart: `relay set URL --key FP` on both hosts (a wrong key is refused first), then the
// daemons, which enrol and publish.
func (d *run) pinAndStart(ctx context.Context) error {
	home := d.hosts["home"]
	if r, err := d.exec(ctx, "", "relay", "set", d.relayURL, "--key", "0000-0000-0000-0000", "--home", home.home); err != nil || r.code == 0 {
		return fmt.Errorf("relay set with a wrong --key was not refused (exit %d, %v)", r.code, err)
	}
	for _, h := range d.hostList() {
		// The fingerprint as the relay log shows it, with the ed25519: prefix, in capitals.
		if _, err := d.must(ctx, "relay", "set", d.relayURL, "--key", strings.ToUpper("ed25519:"+d.fp), "--home", h.home); err != nil {
			return err
		}
	}
	d.detail(fmt.Sprintf("agentmbx relay set %s --key %s   (a wrong --key is refused)", d.relayURL, d.fp))
	for _, h := range d.hostList() {
		if err := d.startDaemon(ctx, h); err != nil {
			return err
		}
	}
	return d.waitEnrolled(ctx, "")
}

func (d *run) hostList() []*hostProc { return []*hostProc{d.hosts["home"], d.hosts["work"]} }

// startDaemon runs `agentmbx daemon` for h (on the LAN address it had before, if any).
func (d *run) startDaemon(ctx context.Context, h *hostProc) error {
	listen := "127.0.0.1:0"
	if h.addr != "" {
		listen = h.addr
	}
	addrFile := h.home + ".addr"
	os.Remove(addrFile)
	p, err := d.start(h.name, d.cfg.DaemonEnv, "daemon", "--home", h.home, "--listen", listen, "--tick", "100ms", "--addr-file", addrFile)
	if err != nil {
		return err
	}
	h.daemon = p
	addr, err := waitAddr(ctx, p, addrFile)
	h.addr = addr
	return err
}

// relayStatus reads `relay status --json` of h (exit 1 means relay use stopped: an error here).
func (d *run) relayStatus(ctx context.Context, h *hostProc) (api.RelayStatus, error) {
	out, err := d.must(ctx, "relay", "status", "--json", "--home", h.home)
	if err != nil {
		return api.RelayStatus{}, err
	}
	var st api.RelayStatus
	return st, json.Unmarshal([]byte(out), &st)
}

// waitEnrolled waits until both daemons are enrolled (in another epoch than notEpoch) with
// their enc-key ad and a current sender allowlist.
func (d *run) waitEnrolled(ctx context.Context, notEpoch string) error {
	for _, h := range d.hostList() {
		err := poll(ctx, h.name+"'s enrolment", func() (bool, string, error) {
			st, err := d.relayStatus(ctx, h)
			if err != nil {
				return false, "", err
			}
			ok := st.Enrolled && st.EncAdExp != "" && st.SendersCurrent && st.Daemon && st.Epoch != notEpoch
			return ok, fmt.Sprintf("%+v", st), nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// send sends n messages from one host's agent to the other's and records them.
func (d *run) send(ctx context.Context, from, to *hostProc, n int, subject string) error {
	for i := range n {
		body := fmt.Sprintf("%s #%d from %s@%s", subject, i+1, from.agent, from.name)
		out, err := d.must(ctx, "send", "--home", from.home, "--as", from.agent, "--to", to.agent+"@"+to.name,
			"--subject", fmt.Sprintf("%s #%d", subject, i+1), "-m", body)
		if err != nil {
			return err
		}
		id := strings.TrimSpace(out)
		if d.ids[id] || id == "" {
			return fmt.Errorf("send printed id %q twice or not at all", id)
		}
		d.ids[id] = true
		d.sent = append(d.sent, oracle.Sent{ID: id, From: from.mailbox(), To: []oracle.Mailbox{to.mailbox()}})
	}
	return nil
}

// ids of the messages sent from the n-th on.
func (d *run) idsFrom(n int) []string {
	var out []string
	for _, s := range d.sent[n:] {
		out = append(out, s.ID)
	}
	return out
}

// waitDelivered waits until every message sent so far is in its mailbox (or the oracle sees one
// that no waiting undoes: a duplicate, a misdelivery, a copy gone back).
func (d *run) waitDelivered(ctx context.Context) error {
	return poll(ctx, "every message in its mailbox", func() (bool, string, error) {
		boxes, err := d.boxes(ctx)
		if err != nil {
			return false, "", err
		}
		t := oracle.Count(d.sent, boxes, &d.watch)
		if t.Duplicated > 0 || t.Misdelivered > 0 || t.WentBack > 0 || t.Uncounted > 0 {
			return true, "", nil // the tally at the end reports it
		}
		return t.Lost == 0, fmt.Sprintf("%d of %d missing", t.Lost, len(d.sent)), nil
	})
}

// mailBothWays: alice@home → bob@work and back, through the relay.
func (d *run) mailBothWays(ctx context.Context) error {
	home, work := d.hosts["home"], d.hosts["work"]
	if err := d.send(ctx, home, work, d.cfg.PerStep, "hello"); err != nil {
		return err
	}
	if err := d.send(ctx, work, home, d.cfg.PerStep, "re: hello"); err != nil {
		return err
	}
	if err := d.waitDelivered(ctx); err != nil {
		return err
	}
	d.detail(fmt.Sprintf("%d messages each way, all delivered through %s", d.cfg.PerStep, d.relayURL))
	return nil
}

// killRelay: mail is sent both ways and the relay is SIGKILLed at once, with pushes and pulls in
// flight; a new relay process on the same store and port serves again.
func (d *run) killRelay(ctx context.Context) error {
	home, work := d.hosts["home"], d.hosts["work"]
	if err := d.send(ctx, home, work, d.cfg.PerStep, "during the crash"); err != nil {
		return err
	}
	if err := d.send(ctx, work, home, d.cfg.PerStep, "during the crash"); err != nil {
		return err
	}
	addr := strings.TrimPrefix(d.relayURL, "http://")
	d.relay.kill()
	d.detail("relay killed with SIGKILL while " + fmt.Sprint(2*d.cfg.PerStep) + " messages were on their way")
	if err := d.send(ctx, home, work, d.cfg.PerStep, "while the relay was down"); err != nil {
		return err
	}
	if _, err := d.serveRelay(ctx, addr); err != nil {
		return err
	}
	if err := d.waitDelivered(ctx); err != nil {
		return err
	}
	d.detail("relay restarted on " + addr + ": everything delivered, nothing twice")
	return nil
}

// restoreDrill: with work stopped, mail for it waits at the relay and is in the online backup;
// work comes back and gets it (bob reads the first); work stops again and more mail reaches the
// relay after the backup. The relay is stopped, restored from the
// backup (a new epoch) and started: it has lost the later mail, which home re-pushes (its rows
// are still relay-accepted, without work's receipt), and holds the earlier mail again, which work
// pulls a second time from the start of the new epoch: its dedup keeps one delivery, and bob's
// copy stays read.
func (d *run) restoreDrill(ctx context.Context) error {
	home, work := d.hosts["home"], d.hosts["work"]
	before, err := d.relayStatus(ctx, home)
	if err != nil {
		return err
	}
	if err := work.daemon.stop(stopWait); err != nil {
		return err
	}
	mark := len(d.sent)
	if err := d.send(ctx, home, work, d.cfg.PerStep, "waiting in the backup"); err != nil {
		return err
	}
	waiting := d.idsFrom(mark)
	if err := d.waitRelayAccepted(ctx, home, waiting); err != nil {
		return err
	}
	backup := filepath.Join(d.dir, "relay-backup.db")
	out, err := d.must(ctx, "relay", "backup", backup, "--store-dir", d.relayDir)
	if err != nil {
		return err
	}
	d.detail(fmt.Sprintf("work stopped; %d messages for it wait at the relay\nagentmbx relay backup: %s", len(waiting), strings.TrimSpace(out)))
	if err := d.startDaemon(ctx, work); err != nil {
		return err
	}
	if err := d.waitDelivered(ctx); err != nil {
		return err
	}
	if err := d.read(ctx, work, waiting[0]); err != nil {
		return err
	}
	d.detail(fmt.Sprintf("work started and got them (bob read %s)", waiting[0]))
	if err := work.daemon.stop(stopWait); err != nil {
		return err
	}
	mark = len(d.sent)
	if err := d.send(ctx, home, work, d.cfg.PerStep, "after the backup"); err != nil {
		return err
	}
	if err := d.waitRelayAccepted(ctx, home, d.idsFrom(mark)); err != nil {
		return err
	}
	d.detail(fmt.Sprintf("work stopped again; %d more messages accepted by the relay after the backup", d.cfg.PerStep))
	if err := d.relay.stop(stopWait); err != nil {
		return err
	}
	out, err = d.must(ctx, "relay", "restore", backup, "--store-dir", d.relayDir)
	if err != nil {
		return err
	}
	d.detail("agentmbx relay restore: " + strings.TrimSpace(out))
	if _, err := d.serveRelay(ctx, strings.TrimPrefix(d.relayURL, "http://")); err != nil {
		return err
	}
	if err := d.startDaemon(ctx, work); err != nil {
		return err
	}
	if err := d.send(ctx, work, home, d.cfg.PerStep, "after the restore"); err != nil {
		return err
	}
	if err := d.waitDelivered(ctx); err != nil {
		return err
	}
	if err := d.waitEnrolled(ctx, before.Epoch); err != nil {
		return err
	}
	after, err := d.relayStatus(ctx, work)
	if err != nil {
		return err
	}
	d.detail(fmt.Sprintf("new epoch %s: both hosts enrolled again; home re-pushed what the restore lost, work pulled\n"+
		"again from the start (receive resets: %d) and kept the mail it already had once", after.Epoch, after.Resets))
	return nil
}

// read has h's agent read message id (`agentmbx read`), and tells the watch: the copy may never
// be seen unread again.
func (d *run) read(ctx context.Context, h *hostProc, id string) error {
	out, err := d.must(ctx, "read", id, "--as", h.agent, "--json", "--home", h.home)
	if err != nil {
		return err
	}
	var m api.Message
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		return fmt.Errorf("read %s printed %q: %w", id, out, err)
	}
	d.watch.Moved(h.mailbox(), id, m.State)
	return nil
}

// waitRelayAccepted waits until h's outbox rows of ids are relay-accepted.
func (d *run) waitRelayAccepted(ctx context.Context, h *hostProc, ids []string) error {
	return poll(ctx, "the relay to accept the new mail", func() (bool, string, error) {
		out, err := d.must(ctx, "outbox", "--all", "--limit", "0", "--json", "--home", h.home)
		if err != nil {
			return false, "", err
		}
		var rows []api.OutboxRow
		if err := json.Unmarshal([]byte(out), &rows); err != nil {
			return false, "", err
		}
		state := map[string]string{}
		for _, r := range rows {
			if r.Kind == "envelope" {
				state[r.MsgID] = r.State
			}
		}
		for _, id := range ids {
			if state[id] != "relay-accepted" {
				return false, id + " is " + state[id], nil
			}
		}
		return true, "", nil
	})
}

// showMailboxes prints each mailbox as `agentmbx inbox --all` shows it.
func (d *run) showMailboxes(ctx context.Context) error {
	for _, h := range d.hostList() {
		out, err := d.must(ctx, "inbox", "--home", h.home, "--as", h.agent, "--all")
		if err != nil {
			return err
		}
		d.say("  %s@%s: agentmbx inbox --as %s --all", h.agent, h.name, h.agent)
		d.detail(out)
	}
	return nil
}

// doctorBoth runs `agentmbx doctor` on both hosts; a failing check fails the demo.
func (d *run) doctorBoth(ctx context.Context) error {
	for _, h := range d.hostList() {
		r, err := d.exec(ctx, "", "doctor", "--home", h.home)
		if err != nil {
			return err
		}
		d.say("  agentmbx doctor --home %s", h.home)
		d.detail(r.stdout)
		if r.code != 0 {
			return fmt.Errorf("doctor on %s: exit %d", h.name, r.code)
		}
	}
	return nil
}
