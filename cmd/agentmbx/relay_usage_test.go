package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/relayserver"
	"github.com/agentmbx/agentmbx/relayserver/sqlitestore"
)

// fillUsageStore makes a SQLite store in dir where key m holds 40 tombstones and 2 queued items
// and key h one queued item for m.
func fillUsageStore(t *testing.T, dir string, m, h string) {
	t.Helper()
	ctx := context.Background()
	st, err := sqlitestore.Open(ctx, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	now := time.Now()
	item := func(target, sender, id string) relayserver.Item {
		w := []byte(`{"v":3,"id":"` + id + `"}`)
		return relayserver.Item{Target: target, Sender: sender, Kind: relayserver.KindEnvelope, ItemID: id, Wire: w,
			WireHash: mbx.SHA256Hex(w), AcceptedAt: now, ExpiresAt: now.Add(14 * 24 * time.Hour)}
	}
	err = st.Update(ctx, func(tx relayserver.Tx) error {
		for _, k := range []string{m, h} {
			if err := tx.PutEnrolment(relayserver.Enrolment{HostPubkey: k, HostName: "n" + k[:4], AuthorizedBy: "host-key", EnrolledAt: now}); err != nil {
				return err
			}
		}
		for i := range 40 {
			if _, err := tx.InsertItem(item(m, m, fmt.Sprintf("t%02d", i))); err != nil {
				return err
			}
		}
		head, err := tx.Head(m)
		if err != nil {
			return err
		}
		if _, err := tx.Ack(m, head.HeadSeq); err != nil {
			return err
		}
		for _, it := range []relayserver.Item{item(m, m, "q1"), item(h, m, "q2"), item(m, h, "h1")} {
			if _, err := tx.InsertItem(it); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// relay usage shows the key holding the space; relay reclaim refuses a key with no deny entry,
// then frees what the denied key holds, by itself when no relay serves the store and through the
// serving relay otherwise.
func TestRelayUsageAndReclaim(t *testing.T) {
	t.Setenv(relayserver.EnvRelayDir, "")
	t.Setenv(relayserver.EnvRelayDB, "")
	dir := t.TempDir()
	mk, hk := mbx.B64(make([]byte, 32)), mbx.B64(append(make([]byte, 31), 1))
	fillUsageStore(t, dir, mk, hk)
	out, _, err := runRelay(t, "usage", "--store-dir", dir, "--json")
	if err != nil {
		t.Fatal(err)
	}
	var rep usageReportJSON
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("usage --json = %q: %v", out, err)
	}
	if rep.DedupRows != 43 || rep.Queued.Items != 3 || len(rep.Keys) != 2 || rep.Keys[0].Pubkey != mk ||
		rep.Keys[0].DedupRows != 42 || rep.Keys[0].State != "live" || rep.Keys[0].Fingerprint != mbx.Fingerprint(mk) {
		t.Fatalf("usage --json = %s", out)
	}
	if out, _, err := runRelay(t, "usage", "--store-dir", dir, "--top", "1"); err != nil ||
		!strings.Contains(out, mbx.Fingerprint(mk)) || strings.Contains(out, mbx.Fingerprint(hk)) || !strings.Contains(out, "43 dedup rows") {
		t.Fatalf("usage --top 1 = %q, %v", out, err)
	}
	fp := mbx.Fingerprint(mk)
	if _, _, err := runRelay(t, "reclaim", "--store-dir", dir, "--fingerprint", fp); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("reclaim without a deny entry = %v", err)
	}
	if _, _, err := runRelay(t, "deny", "add", "--store-dir", dir, "--fingerprint", fp); err != nil {
		t.Fatal(err)
	}
	// No relay serves the store: the command applies the entry and reclaims, and logs it.
	out, errOut, err := runRelay(t, "reclaim", "--store-dir", dir, "--fingerprint", fp, "--json")
	if err != nil {
		t.Fatal(err)
	}
	var res reclaimJSON
	if err := json.Unmarshal([]byte(out), &res); err != nil || res.By != "command" || res.Keys != 1 || res.Items != 3 || res.DedupRows != 42 {
		t.Fatalf("reclaim --json = %q, %v", out, err)
	}
	if !strings.Contains(errOut, "reclaimed the space of denied keys") {
		t.Errorf("reclaim logged %q", errOut)
	}
	out, _, err = runRelay(t, "usage", "--store-dir", dir, "--json")
	if err := json.Unmarshal([]byte(out), &rep); err != nil || rep.DedupRows != 1 || rep.Queued.Items != 0 {
		t.Fatalf("usage after the reclaim = %s, %v", out, err)
	}
	if out, _, err := runRelay(t, "deny", "list", "--store-dir", dir, "--json"); err != nil || !strings.Contains(out, `"dedup_rows": 42`) {
		t.Fatalf("deny list --json after the reclaim = %s, %v", out, err)
	}

	// A relay serves the store: the command asks it through the deny list and waits for its report.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := sqlitestore.Open(ctx, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	key, err := mbx.GenerateSigningKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := relayserver.New(ctx, st, relayserver.Options{Key: key, DenyPollEvery: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	go srv.RunDenyWatch(ctx)
	out, _, err = runRelay(t, "reclaim", "--store-dir", dir, "--fingerprint", fp)
	if err != nil || !strings.Contains(out, "reclaimed 0 items (0 bytes) and 0 dedup rows of 1 keys denied by fingerprint "+fp+" (by the relay)") {
		t.Fatalf("reclaim through the serving relay = %q, %v", out, err)
	}
}
