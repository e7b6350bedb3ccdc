// Package failpoint lets crash tests stop a process at a named point.
//
// Code marks a point with Inject:
//
//	if err := failpoint.Inject("relay.before-commit"); err != nil {
//		return err
//	}
//
// Nothing happens unless the point is enabled, either in the environment of the process
// (MBX_FAILPOINT="relay.before-commit=kill,other.point=block") or, inside a test process, with
// Enable. An enabled point does what its action says:
//
//   - kill: the process sends itself SIGKILL (the default action), so nothing after the point
//     runs and no deferred code or buffered write survives, exactly like a power cut of the
//     process;
//   - block: the calling goroutine blocks forever, so a parent test can kill the process while it
//     sits at the point;
//   - error: Inject returns ErrInjected, for in-process tests of failure paths.
//
// A crash test runs its own test binary (or the agentmbx binary) as a child with MBX_FAILPOINT
// set, drives it until the point fires, then restarts it without the variable and checks what
// survived. Points cost one atomic load when nothing is enabled.
package failpoint

import (
	"errors"
	"os"
	"strings"
	"sync"
	"sync/atomic"
)

// Env is the environment variable read once at the first Inject.
const Env = "MBX_FAILPOINT"

// Action is what an enabled point does.
type Action string

// Actions.
const (
	Kill  Action = "kill"
	Block Action = "block"
	Error Action = "error"
)

// String returns the spelling of a in MBX_FAILPOINT.
func (a Action) String() string { return string(a) }

// ErrInjected is returned by Inject at a point enabled with the error action.
var ErrInjected = errors.New("failpoint: injected error")

var (
	envOnce sync.Once
	any     atomic.Bool
	mu      sync.Mutex
	points  = map[string]Action{}
)

func loadEnv() {
	envOnce.Do(func() {
		v := os.Getenv(Env)
		if v == "" {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		for _, part := range strings.Split(v, ",") {
			part = strings.TrimSpace(part)
			if part == "" {
				continue
			}
			name, act, ok := strings.Cut(part, "=")
			if !ok {
				act = string(Kill)
			}
			points[name] = Action(act)
		}
		any.Store(len(points) > 0)
	})
}

// Inject runs the action of the point name when it is enabled, and returns nil otherwise.
func Inject(name string) error {
	loadEnv()
	if !any.Load() {
		return nil
	}
	mu.Lock()
	act, ok := points[name]
	mu.Unlock()
	if !ok {
		return nil
	}
	switch act {
	case Block:
		select {}
	case Error:
		return ErrInjected
	default:
		killSelf()
		select {} // SIGKILL is not deliverable late, but never continue past a kill point.
	}
}

// Enable turns on the point name with action a in this process and returns a function that
// restores the previous state. For in-process tests; crash tests use the environment.
func Enable(name string, a Action) (restore func()) {
	loadEnv()
	mu.Lock()
	defer mu.Unlock()
	prev, had := points[name]
	points[name] = a
	any.Store(true)
	return func() {
		mu.Lock()
		defer mu.Unlock()
		if had {
			points[name] = prev
		} else {
			delete(points, name)
		}
		any.Store(len(points) > 0)
	}
}
