package relayserver_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/relayserver"
	"github.com/agentmbx/agentmbx/relayserver/sqlitestore"
)

// TestHeartbeatIsWrittenEvery30s: on simulated time, the relay's heartbeat loop writes the
// store's heartbeat at 30 s, 60 s, 90 s (mbx.RelayHeartbeat) and not in between; a relay that
// stops writing it would rotate its epoch at the next start after 10 minutes.
func TestHeartbeatIsWrittenEvery30s(t *testing.T) {
	if mbx.RelayHeartbeat != 30*time.Second {
		t.Fatalf("mbx.RelayHeartbeat = %s, want 30s (the spec's heartbeat)", mbx.RelayHeartbeat)
	}
	dir := t.TempDir()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		st, err := sqlitestore.Open(ctx, dir, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		srv, err := relayserver.New(ctx, st, relayserver.Options{Key: keyFor(t, 3)})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		beatCtx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); srv.RunHeartbeat(beatCtx, mbx.RelayHeartbeat) }()
		heartbeat := func() time.Duration {
			t.Helper()
			m, err := st.Meta(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if m.Heartbeat.IsZero() {
				return -1
			}
			return m.Heartbeat.Sub(start)
		}
		for i, want := range []time.Duration{30 * time.Second, 60 * time.Second, 90 * time.Second} {
			time.Sleep(29 * time.Second)
			synctest.Wait()
			if got := heartbeat(); i == 0 && got != -1 || i > 0 && got != want-30*time.Second {
				t.Fatalf("before %s the heartbeat is at %s", want, got)
			}
			time.Sleep(time.Second)
			synctest.Wait()
			if got := heartbeat(); got != want {
				t.Fatalf("at %s the heartbeat is at %s, want %s", want, got, want)
			}
		}
		stop()
		<-done
	})
}
