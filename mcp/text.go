package mcp

import (
	"errors"
	"fmt"
	"strings"
	"unicode"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/client"
	"github.com/agentmbx/agentmbx/internal/termtext"
)

// The text summaries. Everything that came from another agent (subjects, bodies, notes,
// addresses) goes through line or block first, so no text content carries a terminal escape
// sequence, a carriage return or a bidirectional override; the structured content keeps the
// bytes exactly as sent.

// previewRunes bounds an item's preview.
const previewRunes = 160

// block is text of several lines (a body), line text on one line (a subject, an address):
// internal/termtext escapes their hidden runes, the same as the CLI does.
func block(s string) string { return termtext.Block(s) }

// line also turns newlines, carriage returns and tabs into spaces first: a summary line reads
// better so, and nothing is lost that the structured content does not keep.
func line(s string) string {
	return termtext.Line(strings.Map(func(r rune) rune {
		if r == '\n' || r == '\r' || r == '\t' {
			return ' '
		}
		return r
	}, s))
}

// preview is the start of a body on one line: whitespace runs collapsed, hidden runes dropped,
// at most previewRunes runes (with … when cut).
func preview(body string) string {
	f := strings.FieldsFunc(body, func(r rune) bool { return unicode.IsSpace(r) || termtext.Hidden(r) })
	s := []rune(strings.Join(f, " "))
	if len(s) > previewRunes {
		return string(s[:previewRunes-1]) + "…"
	}
	return string(s)
}

// itemText is a listed message: its id, state and time, then its subject and the start of its
// body inside a fence.
func itemText(b *strings.Builder, m Item, nonce string) {
	fmt.Fprintf(b, "- %s [%s] %s", m.ID, m.State, m.Time)
	if m.Thread != "" && m.Thread != m.ID {
		fmt.Fprintf(b, ", thread %s", line(m.Thread))
	}
	if m.NeedsReply {
		b.WriteString(", needs a reply")
	}
	fmt.Fprintf(b, "\n%s\nsubject: %s\n%s\n%s\n", fenceOpen(nonce, m.From, m.Sender), line(m.Subject), preview(m.Preview), fenceClose(nonce))
}

func listingText(l Listing, what, nonce string) (string, int) {
	if len(l.Messages) == 0 && l.More == 0 {
		return "no mail " + what, 0
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s, oldest first", count(len(l.Messages), "message"), what)
	if l.More > 0 {
		fmt.Fprintf(&b, " (%d more not listed; raise limit or use since)", l.More)
	}
	b.WriteString(":\n")
	for _, m := range l.Messages {
		itemText(&b, m, nonce)
	}
	b.WriteString("Open one with mbx_read {id}.")
	return b.String(), len(l.Messages)
}

func foundText(f Found, nonce string) (string, int) {
	if len(f.Messages) == 0 {
		return fmt.Sprintf("no messages match %q", line(f.Query)), 0
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s match %q, newest first", count(len(f.Messages), "message"), line(f.Query))
	if f.More {
		b.WriteString(" (more match: raise limit or add words)")
	}
	b.WriteString(":\n")
	for _, m := range f.Messages {
		itemText(&b, m, nonce)
	}
	return strings.TrimSuffix(b.String(), "\n"), len(f.Messages)
}

// bodyText is a whole message's subject and body inside a fence.
func bodyText(b *strings.Builder, m Message, nonce string) {
	body := block(m.Body)
	if !strings.HasSuffix(body, "\n") {
		body += "\n"
	}
	fmt.Fprintf(b, "%s\nsubject: %s\n\n%s%s", fenceOpen(nonce, m.From, m.Sender), line(m.Subject), body, fenceClose(nonce))
}

func messageText(m Message, nonce string) (string, int) {
	var b strings.Builder
	fmt.Fprintf(&b, "id: %s\nto: %s\nkind: %s\ntime: %s\nstate: %s\n",
		m.ID, line(strings.Join(m.To, ", ")), m.Kind, m.Time, m.State)
	if m.Thread != "" && m.Thread != m.ID {
		fmt.Fprintf(&b, "thread: %s\n", line(m.Thread))
	}
	if m.ReplyTo != "" {
		fmt.Fprintf(&b, "reply-to: %s\n", line(m.ReplyTo))
	}
	if m.NeedsReply {
		b.WriteString("needs-reply: yes\n")
	}
	if m.Note != "" {
		fmt.Fprintf(&b, "your note: %s\n", line(m.Note))
	}
	bodyText(&b, m, nonce)
	return b.String(), 1
}

func threadText(t Thread, nonce string) (string, int) {
	var b strings.Builder
	fmt.Fprintf(&b, "thread %s: %s, oldest first", line(t.Thread), count(len(t.Messages), "message"))
	if t.Earlier > 0 {
		fmt.Fprintf(&b, " (%d earlier not shown)", t.Earlier)
	}
	for _, m := range t.Messages {
		fmt.Fprintf(&b, "\n\n--- %s [%s] %s\n", m.ID, m.State, m.Time)
		bodyText(&b, m, nonce)
	}
	return b.String(), len(t.Messages)
}

func sentText(verb string, s Sent) string {
	var to []string
	to = append(to, s.Local...)
	for _, h := range s.Hosts {
		to = append(to, "host "+h)
	}
	txt := fmt.Sprintf("%s %s to %s", verb, s.ID, strings.Join(to, ", "))
	if s.Queued {
		txt += "; no daemon is running, so it is queued and leaves when `agentmbx daemon` starts"
	}
	return txt
}

// deliveryText is where a sent message is; a recipient's note is that recipient's words, so it
// is fenced (keys holds the recipients' host keys).
func deliveryText(s api.Sent, keys map[string]string, nonce string) (string, int) {
	var b strings.Builder
	fences := 0
	fmt.Fprintf(&b, "%s %q from %s:", s.ID, line(s.Subject), line(s.From))
	for _, r := range s.Recipients {
		fmt.Fprintf(&b, "\n- %s %s", line(r.Recipient), r.State)
		if r.At != "" {
			fmt.Fprintf(&b, " at %s", line(r.At))
		}
		if r.Note != "" {
			fmt.Fprintf(&b, ", with a note:\n%s\n%s\n%s", noteOpen(nonce, r.Recipient, keys[r.Host]), line(r.Note), noteClose(nonce))
			fences++
		}
	}
	for _, r := range s.Rows {
		fmt.Fprintf(&b, "\n- outbox row to host %s: %s via %s, %s", r.Host, r.State, r.Transport, count(r.Attempts, "attempt"))
		if r.LastError != "" {
			fmt.Fprintf(&b, ", last error: %s", line(r.LastError))
		}
	}
	return b.String(), fences
}

func whoamiText(w WhoAmI) string {
	daemon := "the daemon is running"
	if !w.Daemon {
		daemon = "no daemon is running (start `agentmbx daemon`; until then mail is queued, not moved)"
	}
	relay := "no relay"
	switch {
	case w.Relay.Stopped:
		relay = "relay " + w.Relay.URL + " stopped: it served another key"
	case w.Relay.Configured && w.Relay.Enrolled:
		relay = "relay " + w.Relay.URL + " (enrolled)"
	case w.Relay.Configured:
		relay = "relay " + w.Relay.URL + " (not enrolled yet)"
	}
	txt := fmt.Sprintf("you are %s on host %s (fingerprint %s); %s; %s", w.Address, w.Host, w.Fingerprint, daemon, relay)
	for _, p := range w.Relay.Problems {
		txt += "\nrelay problem: " + line(p)
	}
	return txt
}

func agentsText(a Agents) string {
	var local, known []string
	for _, x := range a.Local {
		s := x.Name
		if x.Role != "" {
			s += " (" + x.Role + ")"
		}
		local = append(local, s)
	}
	for _, k := range a.Known {
		known = append(known, line(k.Address))
	}
	txt := "agents here: " + orNone(local) + "\npaired hosts: " + orNone(a.Peers) + "\nknown agents there: " + orNone(known)
	return txt + "\n(a bare name reaches that agent here and at every paired host)"
}

// count is "1 message", "2 messages".
func count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

// explain makes a tool error say what to fix: the host's hint when it has one, the way to
// start the daemon when none runs.
func explain(err error) error {
	if dn := (*daemonNeeded)(nil); errors.Is(err, client.ErrNoDaemon) && !errors.As(err, &dn) {
		return fmt.Errorf("no agentmbx daemon is running on this host; start it with `agentmbx daemon` (%w)", err)
	}
	var h interface{ Hint() string }
	if errors.As(err, &h) && h.Hint() != "" {
		return fmt.Errorf("%w (%s)", err, h.Hint())
	}
	if api.CodeOf(err) == api.CodeNotFound {
		return fmt.Errorf("%w (mbx_inbox {\"all\": true} lists your mail, mbx_search finds it by words; mbx_sent takes only the ids of messages you sent)", err)
	}
	return err
}
