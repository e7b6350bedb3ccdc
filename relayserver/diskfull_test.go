package relayserver_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentmbx/agentmbx/internal/testkit"
	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/relayserver"
	"github.com/agentmbx/agentmbx/relayserver/sqlitestore"
)

// mountTmpfs mounts a tmpfs of size at a new directory, or skips the test where it cannot (not
// root, no mount; under CI, which runs as root, that fails it).
func mountTmpfs(t *testing.T, size string) string {
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size+",mode=0700", "tmpfs", dir).CombinedOutput(); err != nil {
		testkit.SkipMissing(t, "cannot mount a tmpfs (%v: %s): the disk-full test needs root", err, strings.TrimSpace(string(out)))
	}
	t.Cleanup(func() { _ = exec.Command("umount", dir).Run() })
	return dir
}

// fillDisk writes a file into dir until the disk is full and returns its name.
func fillDisk(t *testing.T, dir string) string {
	name := filepath.Join(dir, "filler")
	f, err := os.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for range 1 << 14 { // 1 GiB at most
		if _, err := f.Write(buf); err != nil {
			return name
		}
	}
	t.Fatal("the disk never filled")
	return name
}

// Finding 2: a store whose disk fills up from outside (logs, another service). The first write
// to hit the full disk fails (503, retryable) and releases the ballast; pushes are then refused
// with rejected:quota:relay without touching the store, while acks, the sweep and enrolment run
// in the ballast's space; once space returns, pushes are accepted again and everything accepted
// is intact. Bounded: a few pushes of 64 KiB on an 8 MiB tmpfs.
func TestDiskFullOnTmpfs(t *testing.T) {
	mnt := mountTmpfs(t, "8m")
	r := &relay{t: t, dir: mnt, key: keyFor(t, 0), clock: testkit.NewClock(t0),
		sopts: sqlitestore.Options{Ballast: 1 << 20},
		opts:  func(o *relayserver.Options) { o.PushesPerMinute = -1 }}
	r.start()
	t.Cleanup(r.stop) // runs before the unmount
	a, b := newHost(t, "alpha", 1), newHost(t, "beta", 2)
	r.enrol(a)
	r.enrol(b)
	item := func(i int) mbx.PushItem { return paddedItem(b, i, 64<<10) }
	var accepted []string
	for i := range 5 {
		if st := statuses(r.push(a, item(i)))[0]; st != "accepted" {
			t.Fatalf("push %d = %s", i, st)
		}
		accepted = append(accepted, item(i).ItemID)
	}
	// A restart (closing checkpoints and deletes the WAL, so the next writes need fresh space),
	// then the disk fills up.
	r.restart()
	filler := fillDisk(t, mnt)
	code, out := r.call(&a, "POST", "/v2/relay/items", mustJSON(t, mbx.PushRequest{Items: []mbx.PushItem{item(100)}}))
	if code != 503 {
		t.Fatalf("push that hits the full disk = %d %s, want 503", code, out)
	}
	for i := 101; i < 104; i++ {
		if st := statuses(r.push(a, item(i)))[0]; st != "rejected:quota:relay" {
			t.Fatalf("push on the full disk = %s, want rejected:quota:relay", st)
		}
	}
	// Everything accepted is there, intact; acks, the sweep and enrolment still work.
	p := r.pull(b, 0)
	if got := ids(p); strings.Join(got, ",") != strings.Join(accepted, ",") {
		t.Fatalf("queue = %v, want the %d accepted", got, len(accepted))
	}
	for i, it := range p.Items {
		if want := mbx.B64(envWire(accepted[i], strings.Repeat("p", 64<<10))); it.WireB64 != want {
			t.Fatalf("item %s changed", it.ItemID)
		}
	}
	if code, out := r.call(&b, "POST", "/v2/relay/ack", mustJSON(t, mbx.AckRequest{Epoch: r.srv.Epoch(), Through: p.HeadSeq})); code != 200 {
		t.Fatalf("ack on a full disk = %d %s", code, out)
	}
	if _, err := r.srv.Sweep(bg); err != nil {
		t.Fatalf("sweep on a full disk: %v", err)
	}
	r.enrol(newHost(t, "gamma", 3))
	if tot, err := r.store.Totals(bg); err != nil || tot.Items != 0 {
		t.Fatalf("totals after the ack = %+v, %v; want an empty relay", tot, err)
	}
	// Space returns: pushes are accepted again (the store looks at the disk at most once a
	// second while it is low).
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a push accepted after space returned", func() bool {
		return statuses(r.push(a, item(1000)))[0] == "accepted"
	})
	if got := ids(r.pull(b, p.HeadSeq)); len(got) != 1 || got[0] != item(1000).ItemID {
		t.Fatalf("queue after recovery = %v", got)
	}
}

// The disk-full path where no tmpfs can be mounted: the database's page cap (max_page_count)
// makes SQLite answer SQLITE_FULL as a full disk does. Pushes are refused retryably (503 for the
// write that hit it, then rejected:quota:relay while the store reports low space), everything
// accepted stays intact, acks and the sweep run, and with room again (a restart with a larger
// cap) pushes are accepted. Bounded: at most 100 pushes of 16 KiB.
func TestStoreFullInjected(t *testing.T) {
	t.Parallel()
	r := newRelayWith(t, func(o *relayserver.Options) { o.PushesPerMinute = -1 }, sqlitestore.Options{MaxPages: 120})
	a, b := newHost(t, "alpha", 1), newHost(t, "beta", 2)
	r.enrol(a)
	r.enrol(b)
	item := func(i int) mbx.PushItem { return paddedItem(b, i, 16<<10) }
	var accepted []string
	refused := 0
	for i := 0; i < 100 && refused < 3; i++ {
		code, out := r.call(&a, "POST", "/v2/relay/items", mustJSON(t, mbx.PushRequest{Items: []mbx.PushItem{item(i)}}))
		switch {
		case code == 503:
			refused++
		case code == 200 && decode[mbx.PushResponse](t, out).Results[0].Status == "accepted":
			accepted = append(accepted, item(i).ItemID)
		case code == 200 && decode[mbx.PushResponse](t, out).Results[0].Status == "rejected:quota:relay":
			refused++
		default:
			t.Fatalf("push %d = %d %s", i, code, out)
		}
	}
	if refused == 0 || len(accepted) == 0 {
		t.Fatalf("accepted %d, refused %d: want the page cap to refuse pushes retryably", len(accepted), refused)
	}
	p := r.pull(b, 0)
	if got := ids(p); strings.Join(got, ",") != strings.Join(accepted, ",") {
		t.Fatalf("queue = %v, want the %d accepted", got, len(accepted))
	}
	if code, out := r.call(&b, "POST", "/v2/relay/ack", mustJSON(t, mbx.AckRequest{Epoch: r.srv.Epoch(), Through: p.HeadSeq})); code != 200 {
		t.Fatalf("ack on a full store = %d %s", code, out)
	}
	if _, err := r.srv.Sweep(bg); err != nil {
		t.Fatalf("sweep on a full store: %v", err)
	}
	r.stop()
	r.sopts.MaxPages = 0
	r.start()
	if st := statuses(r.push(a, item(1000)))[0]; st != "accepted" {
		t.Fatalf("push with room again = %s", st)
	}
}

// paddedItem is envelope i for target b, its wire padded to about size bytes.
func paddedItem(b host, i, size int) mbx.PushItem {
	id := fmt.Sprintf("01KKNTQ69NA67N0QBPXK%06d", i)
	wire := envWire(id, strings.Repeat("p", size))
	return mbx.PushItem{Kind: "envelope", ItemID: id, Targets: []mbx.PushTarget{{HostPubkey: b.pub(), WireB64: mbx.B64(wire)}}}
}
