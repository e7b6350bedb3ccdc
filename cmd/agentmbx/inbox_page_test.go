package main

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/host"
)

// runCLI runs the command in this process and returns its output and exit status.
func runCLI(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	err := Main(context.Background(), args, strings.NewReader(""), &out, &errb)
	return out.String(), errb.String(), exitCode(err)
}

// TestInboxPagingOnThousands: a mailbox of 3,000 messages, 1,000 of them three hours old. The
// default listing is the newest 50, newest last, with a line counting the rest; --limit and
// --since (an id or a duration) bound it, in the table and in --json alike. Cost: ~3,000 local
// sends without fsync, a few seconds.
func TestInboxPagingOnThousands(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a 3,000-message mailbox")
	}
	home := filepath.Join(t.TempDir(), "desk")
	if err := host.Init(home, host.InitOptions{Host: "desk"}); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	var clock time.Time
	h, err := host.Open(home, &host.Options{NoSync: true, Clock: func() time.Time { return clock }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := h.AddAgent(ctx, api.Agent{Name: "bob"}); err != nil {
		t.Fatal(err)
	}
	const total, old = 3000, 1000
	ids := make([]string, total)
	for i := range total {
		clock = now.Add(time.Duration(i) * time.Millisecond)
		if i < old {
			clock = clock.Add(-3 * time.Hour)
		}
		res, err := h.Send(ctx, api.SendRequest{From: "alice", To: []string{"bob"}, Subject: "n", Body: "b"})
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = res.ID
	}
	h.Close()

	out, _, code := runCLI(t, "inbox", "--home", home, "--as", "bob", "--all")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 1+50+1 {
		t.Fatalf("inbox: exit %d, %d lines; want a header, 50 rows and a count line", code, len(lines))
	}
	// The table shows each id by its shortest unique prefix among the rows.
	short := shortIDs(ids[total-50:])
	if !strings.HasPrefix(lines[1], short[ids[total-50]]+"\t") || !strings.HasPrefix(lines[50], short[ids[total-1]]+"\t") {
		t.Fatalf("inbox rows run %q … %q; want the newest 50, newest last", lines[1][:26], lines[50][:26])
	}
	if want := "2950 older messages not shown"; !strings.HasPrefix(lines[51], want) {
		t.Fatalf("last line %q, want %q", lines[51], want)
	}

	page := func(args ...string) ([]api.Message, string) {
		t.Helper()
		out, errOut, code := runCLI(t, append([]string{"inbox", "--home", home, "--as", "bob", "--all", "--json"}, args...)...)
		var msgs []api.Message
		if code != 0 || json.Unmarshal([]byte(out), &msgs) != nil {
			t.Fatalf("inbox %v --json: exit %d\n%s%s", args, code, out, errOut)
		}
		return msgs, errOut
	}
	msgs, errOut := page("--limit", "7")
	if len(msgs) != 7 || msgs[6].ID != ids[total-1] || !strings.HasPrefix(errOut, "2993 older messages not shown") {
		t.Fatalf("--limit 7: %d messages, stderr %q", len(msgs), errOut)
	}
	msgs, errOut = page("--since", ids[total-11], "--limit", "500")
	if len(msgs) != 10 || msgs[0].ID != ids[total-10] || errOut != "" {
		t.Fatalf("--since id: %d messages from %v, stderr %q; want the 10 after it", len(msgs), msgs[0].ID, errOut)
	}
	msgs, _ = page("--since", "2h", "--limit", "0")
	if len(msgs) != total-old || msgs[0].ID != ids[old] {
		t.Fatalf("--since 2h --limit 0: %d messages, want the %d recent ones", len(msgs), total-old)
	}
	msgs, errOut = page("--since", "2h", "--limit", "500")
	if len(msgs) != 500 || !strings.HasPrefix(errOut, "1500 older messages not shown") {
		t.Fatalf("--since 2h --limit 500: %d messages, stderr %q", len(msgs), errOut)
	}
	if msgs, _ = page("--limit", "0"); len(msgs) != total {
		t.Fatalf("--limit 0 lists %d messages, want all %d", len(msgs), total)
	}
}
