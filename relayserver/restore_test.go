package relayserver_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/relayserver"
)

func copyDir(t *testing.T, from, to string) {
	t.Helper()
	ents, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(to, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(from, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(to, e.Name()), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// A file-copy restore that kept its epoch goes back in time: the receiver sees it through
// head_seq < received_through (and BAD_ACK), and new items still get seqs above everything handed
// out before the restore.
func TestRestoreKeepingEpochVisibleThroughHeadSeq(t *testing.T) {
	t.Parallel()
	r, a, b, _ := setup(t, nil)
	r.push(a, envItem("01KKNTQ69NA67N0QBPXKXFN501", b), envItem("01KKNTQ69NA67N0QBPXKXFN502", b))
	epoch := r.srv.Epoch()
	r.stop()
	backup := t.TempDir()
	copyDir(t, r.dir, backup)
	r.start()

	r.clock.Advance(time.Second)
	r.push(a, envItem("01KKNTQ69NA67N0QBPXKXFN503", b))
	p := r.pull(b, 0)
	received := p.LastSeq
	if len(p.Items) != 3 || received != p.HeadSeq {
		t.Fatalf("before the restore beta pulled %+v", p)
	}
	if code, out := r.call(&b, "POST", "/v2/relay/ack", mustJSON(t, mbx.AckRequest{Epoch: epoch, Through: received})); code != 200 {
		t.Fatalf("ack: %d %s", code, out)
	}

	r.stop()
	if err := os.RemoveAll(r.dir); err != nil {
		t.Fatal(err)
	}
	copyDir(t, backup, r.dir)
	r.clock.Advance(time.Second)
	r.start()
	if r.srv.Epoch() != epoch {
		t.Fatalf("the copy restore changed the epoch (%s → %s); this test needs it kept", epoch, r.srv.Epoch())
	}
	p = r.pull(b, received)
	if p.Epoch != epoch || p.HeadSeq >= received {
		t.Fatalf("after the restore head_seq = %d, received_through %d: the rewind is not visible", p.HeadSeq, received)
	}
	code, out := r.call(&b, "POST", "/v2/relay/ack", mustJSON(t, mbx.AckRequest{Epoch: epoch, Through: received}))
	if e := decode[mbx.ErrorResponse](t, out); code != 400 || e.Code != mbx.CodeBadAck {
		t.Fatalf("ack of the pre-restore position = %d %s, want BAD_ACK", code, out)
	}
	// The seq floor: a post-restore item lands above the receiver's checkpoint.
	seq := r.push(a, envItem("01KKNTQ69NA67N0QBPXKXFN504", b)).Results[0].Targets[0].Seq
	if seq <= received {
		t.Fatalf("post-restore seq %d is not above the pre-restore checkpoint %d", seq, received)
	}
}

func TestRelayKeyMismatchRefused(t *testing.T) {
	t.Parallel()
	r, _, _, _ := setup(t, nil)
	r.stop()
	r.key = keyFor(t, 99)
	defer func() { r.key = keyFor(t, 0) }()
	_, _, err := r.open()
	if !errors.Is(err, relayserver.ErrRelayKeyMismatch) {
		t.Fatalf("opening the store with another relay key = %v, want ErrRelayKeyMismatch", err)
	}
	if strings.Contains(err.Error(), r.key.Seed()) || strings.Contains(err.Error(), keyFor(t, 0).Seed()) {
		t.Fatalf("the error echoes key material: %v", err)
	}
}
