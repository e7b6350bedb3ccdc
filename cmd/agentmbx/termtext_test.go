package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/host"
	"github.com/agentmbx/agentmbx/internal/termtext"
)

// TestPrintedTextHasNoControlsOrBidi: a message whose subject and body carry a terminal escape
// sequence, a carriage return, C1 controls and bidi overrides and isolates is printed by inbox,
// read, thread, search and sent with every such rune escaped (internal/termtext), on one line
// where the text is a header or a cell; --json keeps the exact text.
func TestPrintedTextHasNoControlsOrBidi(t *testing.T) {
	const subject = "invoice \u202eexe.pdf\u202c \x1b]0;owned\x07 \u2066x\u2069"
	const body = "line one\r\x1b[2Jwiped\nC1 \u009b31m and \u0085 next\n\u202egnp.exe\n"
	home := filepath.Join(t.TempDir(), "desk")
	if err := host.Init(home, host.InitOptions{Host: "desk"}); err != nil {
		t.Fatal(err)
	}
	h, err := host.Open(home, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, a := range []string{"alice", "bob"} {
		if _, err := h.AddAgent(ctx, api.Agent{Name: a}); err != nil {
			t.Fatal(err)
		}
	}
	res, err := h.Send(ctx, api.SendRequest{From: "alice", To: []string{"bob"}, Subject: subject, Body: body})
	if err != nil {
		t.Fatal(err)
	}
	// The host keeps a subject on one line (its C0 controls become spaces when it is sent); the
	// bidi runes and the C1 ones stay, and the body is kept exactly.
	st, err := h.Sent(ctx, res.ID)
	if err != nil {
		t.Fatal(err)
	}
	stored := st.Subject
	if !strings.Contains(stored, "\u202e") || !strings.Contains(stored, "\u2066") {
		t.Fatalf("stored subject %q lost its bidi runes: the test would show nothing", stored)
	}
	h.Close()

	clean := func(what, out string, lines bool) {
		t.Helper()
		if i := strings.IndexFunc(out, func(r rune) bool { return termtext.Hidden(r) && r != '\n' && (r != '\t' || !lines) }); i >= 0 {
			t.Errorf("%s prints a raw control or bidi rune at %d: %q", what, i, out)
		}
		if !strings.Contains(out, `\u{202e}`) {
			t.Errorf("%s does not show the override as \\u{202e}: %q", what, out)
		}
	}
	for _, args := range [][]string{
		{"inbox", "--as", "bob", "--all"},
		{"read", res.ID, "--as", "bob"},
		{"thread", res.ID, "--as", "bob"},
		{"search", "invoice", "--as", "bob"},
		{"sent", res.ID},
	} {
		out, stderr, code := runCLI(t, append(args, "--home", home)...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, stderr)
		}
		clean(strings.Join(args[:1], " "), out, true)
		if args[0] == "read" || args[0] == "thread" {
			if !strings.Contains(out, `line one\x0d\x1b[2Jwiped`) || !strings.Contains(out, `C1 \u{009b}31m`) {
				t.Errorf("%s body not escaped as expected: %q", args[0], out)
			}
		}
	}

	out, _, code := runCLI(t, "inbox", "--as", "bob", "--all", "--json", "--home", home)
	var msgs []api.Message
	if err := json.Unmarshal([]byte(out), &msgs); code != 0 || err != nil || len(msgs) != 1 || msgs[0].Subject != stored || msgs[0].Body != body {
		t.Fatalf("inbox --json does not keep the exact text: exit %d, %v, %q", code, err, out)
	}
	out, _, _ = runCLI(t, "read", res.ID, "--as", "bob", "--json", "--home", home)
	var m api.Message
	if err := json.Unmarshal([]byte(out), &m); err != nil || m.Body != body || m.Subject != stored {
		t.Fatalf("read --json does not keep the exact text: %v %q", err, out)
	}
}
