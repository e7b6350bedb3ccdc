package host

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/internal/testkit"
)

// TestResolveID: a message id prefix names the one message this host holds or sent that begins
// with it, in any case; a prefix shared by two messages is ambiguous (with both ids in the
// error), one that matches nothing is not found, one shorter than api.MinIDPrefix is refused.
func TestResolveID(t *testing.T) {
	clock := testkit.NewClock(time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC))
	h := newTestHost(t, "desk", clock)
	ctx := context.Background()
	if _, err := h.AddAgent(ctx, api.Agent{Name: "bob"}); err != nil {
		t.Fatal(err)
	}
	send := func() string {
		res, err := h.Send(ctx, api.SendRequest{From: "alice", To: []string{"bob"}, Body: "hi"})
		if err != nil {
			t.Fatal(err)
		}
		return res.ID
	}
	a, b := send(), send() // the same millisecond: they share all but their last characters
	clock.Advance(time.Hour)
	c := send()
	if n := commonLen(a, b); n < 20 {
		t.Fatalf("ids %s and %s of one millisecond share %d characters", a, b, n)
	}
	for _, id := range []string{a, b, c} {
		if got, err := h.ResolveID(ctx, id); err != nil || got != id {
			t.Errorf("ResolveID(%s) = %q, %v", id, got, err)
		}
	}
	if got, err := h.ResolveID(ctx, strings.ToLower(c[:12])); err != nil || got != c {
		t.Errorf("ResolveID(lower-case prefix of %s) = %q, %v", c, got, err)
	}
	_, err := h.ResolveID(ctx, a[:12])
	if !errors.Is(err, api.ErrConflict) || !strings.Contains(err.Error(), a) || !strings.Contains(err.Error(), b) {
		t.Errorf("ResolveID(shared prefix) = %v, want a conflict naming %s and %s", err, a, b)
	}
	if _, err := h.ResolveID(ctx, "7ZZZZZZZZZZZ"); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("ResolveID(no match) = %v, want not found", err)
	}
	for _, bad := range []string{"01AB", "01ABCDEFGHIL", ""} {
		if _, err := h.ResolveID(ctx, bad); !errors.Is(err, api.ErrInvalid) {
			t.Errorf("ResolveID(%q) = %v, want invalid", bad, err)
		}
	}
}

func commonLen(a, b string) int {
	n := 0
	for n < len(a) && a[n] == b[n] {
		n++
	}
	return n
}
