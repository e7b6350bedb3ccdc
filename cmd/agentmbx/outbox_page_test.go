package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/bbolt"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/host"
	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/outbox"
)

// bigOutbox makes a host "desk" whose outbox holds n envelope rows for host "peer", a
// millisecond apart, written on its store in one transaction, and ends them by their index:
// i%3 == 0 done, 1 rejected, 2 still pending. It returns the home and the message ids, oldest
// first. Cost: well under a second for 3,000 rows.
func bigOutbox(t *testing.T, n int) (string, []string) {
	t.Helper()
	home := filepath.Join(t.TempDir(), "desk")
	if err := host.Init(home, host.InitOptions{Host: "desk"}); err != nil {
		t.Fatal(err)
	}
	db, err := bbolt.Open(filepath.Join(home, host.StateFile), 0o600, &bbolt.Options{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	now := time.Now().Add(-time.Hour)
	clock := now
	ob, err := outbox.Open(db, &outbox.Options{Clock: func() time.Time { return clock }})
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, n)
	ulids := mbx.NewULIDs(rand.Reader)
	key := base64.StdEncoding.EncodeToString(make([]byte, 32))
	err = ob.Update(context.Background(), func(tx *outbox.Tx) error {
		for i := range ids {
			clock = now.Add(time.Duration(i) * time.Millisecond)
			ids[i] = ulids.New(clock)
			_, err := tx.Add(outbox.NewRow{Kind: outbox.KindEnvelope, ItemID: ids[i], Host: "peer", HostKey: key,
				Wire: []byte(`{"v":3}`), Agent: "alice", Subject: "n", Transport: outbox.TransportLAN})
			if err != nil {
				return err
			}
		}
		for i, id := range ids {
			k := outbox.Key{ItemID: id, Host: "peer"}
			var err error
			switch i % 3 {
			case 0:
				_, err = tx.MarkDelivered(k)
			case 1:
				_, err = tx.MarkRejected(k, outbox.TransportLAN, "no such agent", false)
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return home, ids
}

// TestOutboxPagingOnThousands: an outbox of 3,000 rows, a third of them still pending. The
// default listing is the newest 50 waiting rows, newest last, with a line counting the rest;
// --state, --all and --limit pick and bound it, in the table and in --json alike; bad flags are
// usage errors. All on the store (no daemon); TestE2EOutboxRetry lists through a daemon.
func TestOutboxPagingOnThousands(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a 3,000-row outbox")
	}
	const total = 3000
	home, ids := bigOutbox(t, total)
	pendingID := func(k int) string { return ids[total-1-3*k] } // k-th newest pending (total%3 == 0)

	out, _, code := runCLI(t, "outbox", "--home", home)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 1+50+1 {
		t.Fatalf("outbox: exit %d, %d lines; want a header, 50 rows and a count line\n%s", code, len(lines), out)
	}
	shown := make([]string, 50)
	for k := range shown {
		shown[k] = pendingID(k)
	}
	short := shortIDs(shown) // the table shows the shortest unique prefix of each id
	if !strings.HasPrefix(lines[1], short[pendingID(49)]+"\t") || !strings.HasPrefix(lines[50], short[pendingID(0)]+"\t") || !strings.Contains(lines[50], "pending") {
		t.Fatalf("outbox rows run %q … %q; want the newest 50 pending ones, newest last", lines[1], lines[50])
	}
	if want := "950 older rows not shown"; !strings.HasPrefix(lines[51], want) {
		t.Fatalf("last line %q, want %q", lines[51], want)
	}

	page := func(args ...string) ([]api.OutboxRow, string) {
		t.Helper()
		out, errOut, code := runCLI(t, append([]string{"outbox", "--home", home, "--json"}, args...)...)
		var rows []api.OutboxRow
		if code != 0 || json.Unmarshal([]byte(out), &rows) != nil {
			t.Fatalf("outbox %v --json: exit %d\n%s%s", args, code, out, errOut)
		}
		return rows, errOut
	}
	states := func(rows []api.OutboxRow) map[string]int {
		m := map[string]int{}
		for _, r := range rows {
			m[r.State]++
		}
		return m
	}
	rows, errOut := page("--limit", "7")
	if len(rows) != 7 || rows[6].MsgID != pendingID(0) || states(rows)["pending"] != 7 || !strings.HasPrefix(errOut, "993 older rows not shown") {
		t.Fatalf("--limit 7: %d rows %v, stderr %q", len(rows), states(rows), errOut)
	}
	rows, errOut = page("--state", "rejected", "--limit", "500")
	if len(rows) != 500 || states(rows)["rejected"] != 500 || rows[499].MsgID != ids[total-2] || !strings.HasPrefix(errOut, "500 older rows not shown") {
		t.Fatalf("--state rejected: %d rows %v, stderr %q", len(rows), states(rows), errOut)
	}
	rows, _ = page("--state", "done,rejected", "--state", "done", "--limit", "0")
	if len(rows) != 2000 || states(rows)["done"] != 1000 || rows[0].MsgID != ids[0] {
		t.Fatalf("--state done,rejected --limit 0: %d rows %v", len(rows), states(rows))
	}
	rows, errOut = page("--all", "--limit", "500")
	if len(rows) != 500 || rows[499].MsgID != ids[total-1] || rows[0].MsgID != ids[total-500] || !strings.HasPrefix(errOut, "2500 older rows not shown") {
		t.Fatalf("--all: %d rows, stderr %q", len(rows), errOut)
	}
	if rows, _ = page("--all", "--limit", "0"); len(rows) != total {
		t.Fatalf("--all --limit 0 lists %d rows, want %d", len(rows), total)
	}
	if rows, errOut = page("--state", "expired"); len(rows) != 0 || errOut != "" {
		t.Fatalf("--state expired: %d rows, stderr %q; want none", len(rows), errOut)
	}
	if out, _, _ := runCLI(t, "outbox", "--home", home, "--state", "expired"); out != "no outbox rows in state expired\n" {
		t.Fatalf("--state expired: %q", out)
	}

	for _, args := range [][]string{{"--state", "sent"}, {"--limit", "501"}, {"--limit", "-1"}} {
		if _, errOut, code := runCLI(t, append([]string{"outbox", "--home", home}, args...)...); code != 2 || !strings.Contains(errOut, "outbox: bad") {
			t.Fatalf("outbox %v: exit %d, stderr %q; want a usage error", args, code, errOut)
		}
	}
}

// With nothing waiting, the default listing says how many finished rows --all would show.
func TestOutboxNothingWaiting(t *testing.T) {
	home, ids := bigOutbox(t, 2) // one done, one rejected
	out, _, code := runCLI(t, "outbox", "--home", home)
	if want := fmt.Sprintf("nothing waiting in the outbox; %d finished rows (--all lists them)\n", len(ids)); code != 0 || out != want {
		t.Fatalf("outbox: exit %d, %q; want %q", code, out, want)
	}
}
