package host

import (
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/internal/testkit"
)

// TestStateDBFsync: the host's bbolt store fsyncs every commit and its growth, as the daemon and
// the commands open it (Options with no NoSync: the zero value, or only a logger), and only a
// caller that asks for NoSync gets it. Init and PrepareRotation open the store through the same
// options with noSync false.
func TestStateDBFsync(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "home")
	if err := Init(dir, InitOptions{Host: "alpha", Rand: testkit.Rand(1)}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		opts   *Options
		noSync bool
	}{
		{"nil options", nil, false},
		{"as the daemon and the commands", &Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, false},
		{"NoSync asked for", &Options{NoSync: true}, true},
	} {
		h, err := Open(dir, c.opts)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if h.db.NoSync != c.noSync || h.db.NoGrowSync || h.db.IsReadOnly() {
			t.Errorf("%s: bbolt NoSync %v NoGrowSync %v ReadOnly %v; want NoSync %v, the others false",
				c.name, h.db.NoSync, h.db.NoGrowSync, h.db.IsReadOnly(), c.noSync)
		}
		if err := h.Close(); err != nil {
			t.Fatal(err)
		}
	}
	o := stateDBOptions(3*time.Second, false)
	if o.NoSync || o.NoGrowSync || o.ReadOnly || o.Timeout != 3*time.Second {
		t.Errorf("stateDBOptions(3s, false) = %+v; want fsync on, writable, a 3 s lock timeout", o)
	}
	// A second opener waits for the lock at most the timeout, then is told the store is locked.
	h, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if _, err := Open(dir, &Options{LockTimeout: 50 * time.Millisecond}); !errors.Is(err, api.ErrLocked) {
		t.Errorf("a second Open while the store is held = %v, want api.ErrLocked", err)
	}
}
