package doctor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/internal/shellquote"
	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/relayclient"
)

// Clock skew the relay tolerates on a signed hop, and where doctor starts to warn.
const (
	skewFail = 5 * time.Minute
	skewWarn = time.Minute
	// adWarn is how long before its expiry a published enc-key ad is warned about (the daemon
	// republishes it daily).
	adWarn = 3 * 24 * time.Hour
)

// The clock fix: NTP through systemd (run as root).
const (
	clockAdvice = "synchronise this machine's clock with NTP"
	clockFix    = "timedatectl set-ntp true"
	republishes = "the daemon republishes it daily; if it runs, check its log"
)

// checkRelay: the pinned relay, how its key was pinned, and what the relay serves now.
func checkRelay(ctx context.Context, env Env, rs api.RelayStatus, r *Report) {
	if !rs.Configured {
		r.add(Check{ID: "relay", Status: Info, Summary: "no relay set: only peers on the LAN are reached",
			Detail: "for peers on other networks: agentmbx relay set URL --key FINGERPRINT"})
		return
	}
	if rs.V1 {
		checkRelayV1(ctx, env, rs, r)
		return
	}
	how := "pinned with --key"
	if rs.TOFU {
		how = "trusted on first use"
	}
	r.add(Check{ID: "relay", Status: OK, Summary: rs.URL + ", key " + rs.Fingerprint + " " + how,
		Detail: "pinned " + rs.PinnedAt})
	if rs.TOFU {
		r.add(Check{ID: "relay.pin", Status: Warn, Summary: "the relay key was trusted on first use, not checked against its operator's fingerprint",
			Detail: "compare the fingerprint with the relay's operator, then pin it",
			Fix:    env.command("relay", "set", rs.URL, "--key", rs.Fingerprint)})
	}
	checkPlainRemote(rs, r)
	ctx, cancel := context.WithTimeout(ctx, env.RelayTimeout)
	defer cancel()
	p, err := relayclient.DiscoverProbe(ctx, rs.URL, relayOptions(env, rs))
	if err != nil {
		c := Check{ID: "relay.reach", Status: Fail, Summary: "relay unreachable: " + err.Error(),
			Detail: "is the relay running, is the URL right?", Fix: "agentmbx relay info " + shellquote.Quote(rs.URL)}
		if errors.Is(err, relayclient.ErrUntrustedCert) {
			c.Detail, c.Fix = "for a relay with a certificate from a private CA, pin the CA too: agentmbx relay set "+rs.URL+" --key "+rs.Fingerprint+" --ca CA.pem", ""
		}
		r.add(c)
		checkRelayState(env, rs, "", r)
		return
	}
	r.add(Check{ID: "relay.reach", Status: OK, Summary: "answers, version " + orDash(p.Info.Version) + ", epoch " + p.Info.Epoch})
	checkRelayKey(env, rs, p.Info, r)
	checkClock(p, r)
	checkRelayState(env, rs, p.Info.Epoch, r)
}

// checkPlainRemote warns about plain http to a remote relay.
func checkPlainRemote(rs api.RelayStatus, r *Report) {
	if relayclient.PlainRemote(rs.URL) {
		r.add(Check{ID: "relay.tls", Status: Warn, Summary: "plain http to a remote relay: who talks to whom travels in clear",
			Detail: "hops are signed and bodies sealed, so nothing can be read or forged, but metadata is visible\n" +
				"serve the relay with --tls-cert/--tls-key or --acme-domain (or behind a TLS proxy) and pin its https:// URL with agentmbx relay set"})
	}
}

// checkRelayV1: a relay accepted although it speaks only v1 (relay set --allow-v1). It is
// unauthenticated; doctor says whether it still answers v1 only or now v2 (with the key to pin),
// and checks the enrolment and the v1 enc-key ad the daemon keeps there.
func checkRelayV1(ctx context.Context, env Env, rs api.RelayStatus, r *Report) {
	r.add(Check{ID: "relay", Status: OK, Summary: rs.URL + ", a v1 relay (AgentMBX 0.5.x before 0.5.5), accepted with --allow-v1",
		Detail: "pinned " + rs.PinnedAt})
	r.add(Check{ID: "relay.v1", Status: Warn, Summary: "the relay is unauthenticated: it speaks only the v1 API, has no key, and signs nothing it answers",
		Detail: "it can drop, hold back or misroute mail unnoticed: mail it took stays pending until the delivery receipt comes back, and alerts at its deadline if none does; bodies stay sealed and signed end to end",
		Fix:    "ask the relay's operator for a v2 relay (agentmbx relay serve), then agentmbx relay set " + rs.URL + " --key FINGERPRINT"})
	checkPlainRemote(rs, r)
	ctx, cancel := context.WithTimeout(ctx, env.RelayTimeout)
	defer cancel()
	p, err := relayclient.DiscoverProbe(ctx, rs.URL, relayOptions(env, rs))
	switch {
	case errors.Is(err, relayclient.ErrV1Only):
		r.add(Check{ID: "relay.reach", Status: OK, Summary: "answers, v1 only (404 to /v2/relay/info)"})
	case err != nil:
		r.add(Check{ID: "relay.reach", Status: Fail, Summary: "relay unreachable: " + err.Error(),
			Fix: "is the relay running, is the URL right?"})
	default:
		fp := mbx.Fingerprint(p.Info.RelayPubkey)
		r.add(Check{ID: "relay.reach", Status: OK, Summary: "answers, version " + orDash(p.Info.Version) + ", epoch " + p.Info.Epoch})
		r.add(Check{ID: "relay.v2", Status: Warn, Summary: "the relay answers v2 now, with key " + fp + ": pin it to use the relay authenticated",
			Detail: "until then this host goes on speaking v1 to it; compare the fingerprint with the relay's operator first",
			Fix:    env.command("relay", "set", rs.URL, "--key", fp)})
		checkClock(p, r)
	}
	daemonFix := ""
	if !env.Daemon {
		daemonFix = "agentmbx daemon --home " + env.Home
	}
	enrolFailed := ""
	for _, p := range rs.Problems {
		if p.Op == "enrol" {
			enrolFailed = p.Error
		}
	}
	switch {
	case enrolFailed != "":
		r.add(Check{ID: "relay.enrol", Status: Warn, Summary: "the last enrolment failed; the daemon retries it: " + enrolFailed,
			Fix: "is the relay up and reachable?"})
	case rs.Enrolled:
		r.add(Check{ID: "relay.enrol", Status: OK, Summary: "enrolled (the relay's unsigned word; the daemon enrols again when a hop is refused)",
			Detail: "at " + rs.EnrolledAt})
	default:
		r.add(Check{ID: "relay.enrol", Status: Warn, Summary: "not enrolled yet", Detail: "the daemon enrols within a minute of starting", Fix: daemonFix})
	}
	if rs.EncAdAt == "" {
		r.add(Check{ID: "relay.enc-ad", Status: Warn, Summary: "v1 enc-key ad not published at the relay", Fix: daemonFix})
	} else {
		r.add(Check{ID: "relay.enc-ad", Status: OK, Summary: "v1 enc-key ad published " + rs.EncAdAt + " (v1 ads do not expire; senders seal only to keys pinned at pairing)"})
	}
	r.add(Check{ID: "relay.senders", Status: Info, Summary: "a v1 relay takes no sender allowlist: any host enrolled there can queue mail for this one"})
	for _, p := range rs.Problems {
		if p.Op != "enrol" {
			r.add(Check{ID: "relay." + p.Op, Status: Warn, Summary: "last " + p.Op + " failed: " + p.Error, Detail: "at " + p.At})
		}
	}
}

// checkRelayKey: the relay serves the pinned key, and relay use is not stopped.
func checkRelayKey(env Env, rs api.RelayStatus, info mbx.InfoResponse, r *Report) {
	served := mbx.Fingerprint(info.RelayPubkey)
	switch {
	case info.RelayPubkey != rs.RelayPubkey:
		r.add(Check{ID: "relay.key", Status: Fail, Summary: fmt.Sprintf("the relay serves key %s, not the pinned %s", served, rs.Fingerprint),
			Detail: "relay use stops until the owner confirms the new key; compare it with the relay's operator first",
			Fix:    env.command("relay", "set", rs.URL, "--key", served)})
	case rs.Stopped && rs.KeyChange != nil:
		r.add(Check{ID: "relay.key", Status: Fail, Summary: fmt.Sprintf("relay use is stopped: the relay served key %s at %s", rs.KeyChange.Served, rs.KeyChange.At),
			Detail: "it serves the pinned key " + rs.Fingerprint + " again now",
			Fix:    env.command("relay", "set", rs.URL, "--key", rs.Fingerprint)})
	default:
		r.add(Check{ID: "relay.key", Status: OK, Summary: "serves the pinned key " + rs.Fingerprint})
	}
}

// checkClock: this host's clock against the relay's Date header.
func checkClock(p relayclient.Probe, r *Report) {
	if p.Date.IsZero() {
		r.add(Check{ID: "relay.clock", Status: Info, Summary: "the relay sent no Date header: clock skew unknown"})
		return
	}
	skew := p.Skew()
	abs := skew.Abs()
	desc := fmt.Sprintf("this clock is %s %s the relay's", abs.Round(time.Second), map[bool]string{true: "behind", false: "ahead of"}[skew > 0])
	switch {
	case abs >= skewFail:
		r.add(Check{ID: "relay.clock", Status: Fail, Summary: desc + ": signed requests are refused beyond 5 minutes",
			Detail: clockAdvice, Fix: clockFix})
	case abs >= skewWarn:
		r.add(Check{ID: "relay.clock", Status: Warn, Summary: desc + " (refused beyond 5 minutes)",
			Detail: clockAdvice, Fix: clockFix})
	default:
		r.add(Check{ID: "relay.clock", Status: OK, Summary: "within a minute of the relay's (" + abs.Round(time.Second).String() + ")"})
	}
}

// checkRelayState: enrolment under the current relay key and epoch (the enrolment cache the daemon
// keeps; docs/design.md: Enrolment and publications), the enc-key ad, the sender allowlist, and the
// last failures. served is the epoch the relay serves now ("" when unknown).
func checkRelayState(env Env, rs api.RelayStatus, served string, r *Report) {
	daemonFix := ""
	if !env.Daemon {
		daemonFix = env.command("daemon")
	}
	var refused, failing string
	for _, p := range rs.Problems {
		switch {
		case p.Op != "enrol":
		case p.Refused():
			refused = p.Error
		default:
			failing = p.Error
		}
	}
	switch {
	case refused != "" && rs.Token != nil:
		r.add(Check{ID: "relay.enrol", Status: Fail, Summary: "the relay refused the enrolment: " + refused,
			Detail: "get a fresh account token into " + rs.Token.Source + " for this host's key, then restart the daemon"})
	case refused != "":
		r.add(Check{ID: "relay.enrol", Status: Fail, Summary: "the relay refused the enrolment: " + refused,
			Detail: "ask the relay's operator to admit this host's key, then restart the daemon"})
	case failing != "":
		r.add(Check{ID: "relay.enrol", Status: Warn, Summary: "the last enrolment failed; the daemon retries it: " + failing,
			Detail: "is the relay up and reachable?", Fix: "agentmbx relay info " + shellquote.Quote(rs.URL)})
	case served != "" && rs.Epoch != "" && served != rs.Epoch:
		r.add(Check{ID: "relay.enrol", Status: Warn, Summary: "the relay has a new epoch " + served + " (a restore or reset): re-enrolment due",
			Detail: fmt.Sprintf("enrolled under epoch %s; the daemon enrols again, re-pushes what the relay held and pulls from 0", rs.Epoch),
			Fix:    daemonFix})
	case rs.Enrolled:
		r.add(Check{ID: "relay.enrol", Status: OK, Summary: fmt.Sprintf("enrolled under key %s, epoch %s", rs.Fingerprint, rs.Epoch),
			Detail: "at " + rs.EnrolledAt})
	default:
		r.add(Check{ID: "relay.enrol", Status: Warn, Summary: "not enrolled yet under key " + rs.Fingerprint + ", epoch " + orDash(rs.Epoch),
			Detail: "the daemon enrols within a minute of starting", Fix: daemonFix})
	}
	checkAccount(rs, r)
	checkEncAd(env, rs, r, daemonFix)
	switch {
	case rs.SendersAt == "":
		r.add(Check{ID: "relay.senders", Status: Warn, Summary: "sender allowlist not published: the relay accepts pushes to this host from any enrolled key",
			Fix: daemonFix})
	case !rs.SendersCurrent:
		r.add(Check{ID: "relay.senders", Status: Warn, Summary: fmt.Sprintf("the published allowlist (%d keys, %s) is not the current peers", rs.Senders, rs.SendersAt),
			Detail: "the daemon republishes it within a minute", Fix: daemonFix})
	default:
		r.add(Check{ID: "relay.senders", Status: OK, Summary: fmt.Sprintf("allowlist of %d peer keys published %s, current", rs.Senders, rs.SendersAt)})
	}
	for _, p := range rs.Problems {
		if p.Op == "enrol" {
			continue
		}
		r.add(Check{ID: "relay." + p.Op, Status: Warn, Summary: "last " + p.Op + " failed: " + p.Error, Detail: "at " + p.At})
	}
}

// checkAccount: the account the relay says the enrolment proved, and the account token this host
// enrols with (where it comes from, its account and exp, whether it expired or is unusable;
// never its value).
func checkAccount(rs api.RelayStatus, r *Report) {
	account := "no account proven (enrolled by the host-key challenge)"
	if rs.Account != "" {
		account = "account " + rs.Account
	}
	t := rs.Token
	switch {
	case t == nil:
		r.add(Check{ID: "relay.account", Status: OK, Summary: account + "; no account token set"})
	case t.Error != "":
		r.add(Check{ID: "relay.account", Status: Fail, Summary: account + "; the account token in " + t.Source + " is unusable: " + t.Error,
			Detail: "put a valid account token into " + t.Source})
	case t.Expired:
		r.add(Check{ID: "relay.account", Status: Warn, Summary: account + "; the account token in " + t.Source + " expired at " + t.Exp,
			Detail: "enrolled hosts keep working; the next enrolment needs a fresh token: put one into " + t.Source})
	default:
		r.add(Check{ID: "relay.account", Status: OK, Summary: account + "; account token from " + t.Source +
			", account " + orDash(t.Account) + ", expires " + orDash(t.Exp)})
	}
}

func checkEncAd(env Env, rs api.RelayStatus, r *Report, fix string) {
	if rs.EncAdAt == "" {
		r.add(Check{ID: "relay.enc-ad", Status: Warn, Summary: "enc-key ad not published at the relay", Fix: fix})
		return
	}
	exp, err := mbx.ParseISOTime(rs.EncAdExp)
	left := exp.Sub(env.Now())
	switch {
	case err != nil:
		r.add(Check{ID: "relay.enc-ad", Status: Warn, Summary: "enc-key ad published " + rs.EncAdAt + ", expiry unreadable"})
	case left <= 0:
		r.add(Check{ID: "relay.enc-ad", Status: Fail, Summary: "enc-key ad expired " + rs.EncAdExp + ": senders cannot seal mail to this host through the relay",
			Detail: republishes, Fix: fix})
	case left < adWarn:
		r.add(Check{ID: "relay.enc-ad", Status: Warn, Summary: "enc-key ad expires soon: " + rs.EncAdExp,
			Detail: republishes, Fix: fix})
	default:
		r.add(Check{ID: "relay.enc-ad", Status: OK, Summary: "enc-key ad published " + rs.EncAdAt + ", expires " + rs.EncAdExp})
	}
}

func orDash(s string) string { return orText(s, "-") }

func orText(s, alt string) string {
	if s == "" {
		return alt
	}
	return s
}
