package relayserver_test

import (
	"fmt"
	"testing"

	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/relayserver"
)

// A batch's later items for a target it already stored to skip the admission query: repeats in
// the batch are still duplicates (even past a quota) or conflicts, and quotas still count every
// item of the batch, the duplicates of earlier pushes included.
func TestBatchRepeatsAndQuotasAfterTheFirstItem(t *testing.T) {
	t.Parallel()
	r, a, b, g := setup(t, func(o *relayserver.Options) {
		o.Limits = mbx.DefaultLimits()
		o.Limits.MaxSenderItems = 2
		o.PushesPerMinute = -1
	})
	id := func(i int) string { return fmt.Sprintf("01KKNTQ69NA67N0QBPXKXFN6%02d", i) }
	other := envItem(id(1), b)
	other.Targets[0].WireB64 = mbx.B64(envWire(id(1), "-other-bytes"))
	got := fmt.Sprint(statuses(r.push(a, envItem(id(1), b), envItem(id(1), b), other, envItem(id(2), b),
		envItem(id(3), b), envItem(id(2), b), envItem(id(4), g))))
	want := "[accepted duplicate rejected:conflict accepted rejected:quota:sender_items duplicate accepted]"
	if got != want {
		t.Fatalf("batch = %s\nwant    %s", got, want)
	}
	// The next push sees the same state through the admission query.
	got = fmt.Sprint(statuses(r.push(a, envItem(id(2), b), envItem(id(5), b))))
	if got != "[duplicate rejected:quota:sender_items]" {
		t.Fatalf("next push = %s", got)
	}
	if p := r.pull(b, 0); len(p.Items) != 2 || p.Items[0].ItemID != id(1) || p.Items[1].ItemID != id(2) {
		t.Fatalf("beta holds %v, want %s and %s", ids(p), id(1), id(2))
	}
}
