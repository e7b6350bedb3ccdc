package testkit

import (
	"fmt"
	"os"
	"testing"
)

// CI reports whether the tests run under CI (CI=true, as .ci/run sets it): there every
// environment a test needs is installed, so a missing one is a failure, not a skip.
func CI() bool { return os.Getenv("CI") == "true" }

// SkipMissing skips t for a missing piece of its environment (a tool, a permission, a port taken
// by someone else), saying what is missing; under CI it fails t instead, so that a test CI should
// run never passes by skipping.
func SkipMissing(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if CI() {
		t.Fatalf("%s (CI=true: this test must run here)", msg)
	}
	t.Skip(msg)
}
