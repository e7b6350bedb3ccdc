package outbox

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// maxAlertSubject is the envelope subject limit (200 characters).
const maxAlertSubject = 200

// Alert is the text of the mail that tells a local sender its message did not make it. The host
// sends it (from the host to Agent, kind "alert"); this package only words it.
type Alert struct {
	Agent   string // the local agent that sent the message
	Subject string // "Undelivered to <host>: <subject>" or "Undelivered/unconfirmed to <host>: <subject>"
	Body    string // what happened, the reason, and the facts of the row
}

// AlertFor words the alert for a row that ended without delivery (the rows Sweep returns, and
// rows that MarkRejected or MarkExpired ended). ok is false when no alert is due: an active or
// done row, a receipt row (receipts are advisory), or a row without a local sender agent.
//
// neverHeard is the host's knowledge that no delivery receipt has ever arrived from the row's
// host. For an unconfirmed row it switches to the older-peer wording: a host older than 0.5.3
// never sends receipts, so the mail may well have arrived and only its confirmation is missing.
func AlertFor(r Row, neverHeard bool) (a Alert, ok bool) {
	if r.Kind != KindEnvelope || r.Agent == "" {
		return Alert{}, false
	}
	subj := r.Subject
	if subj == "" {
		subj = "(no subject)"
	}
	var b strings.Builder
	switch r.State {
	case StateExpired, StateRejected:
		a.Subject = fmt.Sprintf("Undelivered to %s: %s", r.Host, subj)
		if r.State == StateExpired {
			fmt.Fprintf(&b, "Your message %s to %s was not delivered and will not be retried.\n", r.MsgID, r.Host)
		} else {
			fmt.Fprintf(&b, "Your message %s to %s was refused and will not be retried.\n", r.MsgID, r.Host)
		}
		fmt.Fprintf(&b, "Reason: %s\n", r.Reason)
		if r.LastError != "" && r.LastError != r.Reason {
			fmt.Fprintf(&b, "Last error: %s\n", r.LastError)
		}
		if !r.LANUnsignedAt.IsZero() && r.State == StateExpired {
			fmt.Fprintf(&b, "%s said over the LAN (last at %s) that it stored it, but without a signed statement "+
				"(a host that cannot sign, such as AgentMBX 0.5.x), and no delivery receipt came: "+
				"the message may have arrived, unconfirmed.\n", r.Host, r.LANUnsignedAt.Format(isoLayout))
		}
	case StateUnconfirmed:
		a.Subject = fmt.Sprintf("Undelivered/unconfirmed to %s: %s", r.Host, subj)
		fmt.Fprintf(&b, "Your message %s to %s was accepted by the relay but its delivery was never confirmed.\n", r.MsgID, r.Host)
		fmt.Fprintf(&b, "Reason: %s\n", r.Reason)
		if neverHeard {
			fmt.Fprintf(&b, "No delivery receipt has ever arrived from %s. It may run agentmbx older than 0.5.3, "+
				"which sends no delivery receipts: the message may have been delivered, but there is no delivery confirmation.\n", r.Host)
		} else {
			fmt.Fprintf(&b, "%s has sent delivery receipts before, so this message was probably not delivered.\n", r.Host)
		}
	default:
		return Alert{}, false
	}
	fmt.Fprintf(&b, "Subject: %s\nAttempts: %d", subj, r.Attempts)
	if r.Transport != TransportNone {
		fmt.Fprintf(&b, " (last over %s)", r.Transport)
	}
	b.WriteString("\n")
	if r.Relay != "" {
		fmt.Fprintf(&b, "Relay: %s (epoch %s, seq %d, accepted %s)\n", r.Relay, r.Epoch, r.Seq, r.AcceptedAt.Format(isoLayout))
	}
	a.Agent = r.Agent
	a.Subject = cutRunes(a.Subject, maxAlertSubject)
	a.Body = b.String()
	return a, true
}

// cutRunes shortens s to at most n characters, ending in "…" when cut.
func cutRunes(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}
