package failpoint

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/agentmbx/agentmbx/internal/testkit"
)

func TestInjectDisabledIsNil(t *testing.T) {
	if err := Inject("nothing.here"); err != nil {
		t.Fatalf("Inject of a disabled point = %v, want nil", err)
	}
}

func TestEnableErrorAndRestore(t *testing.T) {
	restore := Enable("test.point", Error)
	if err := Inject("test.point"); !errors.Is(err, ErrInjected) {
		t.Fatalf("Inject = %v, want ErrInjected", err)
	}
	if err := Inject("test.other"); err != nil {
		t.Fatalf("Inject of another point = %v, want nil", err)
	}
	restore()
	if err := Inject("test.point"); err != nil {
		t.Fatalf("Inject after restore = %v, want nil", err)
	}
}

// TestKillFromEnvironment runs this test binary as a child with MBX_FAILPOINT set and checks that
// the point killed it with SIGKILL before the line after it ran.
func TestKillFromEnvironment(t *testing.T) {
	if os.Getenv("FAILPOINT_TEST_CHILD") == "1" {
		_ = Inject("child.point")
		fmt.Println("survived")
		os.Exit(0)
	}
	cmd := testkit.Child("TestKillFromEnvironment", "FAILPOINT_TEST_CHILD=1", Env+"=other.point=block, child.point")
	out, err := cmd.Output()
	if !testkit.KilledBySIGKILL(err) || strings.Contains(string(out), "survived") {
		t.Fatalf("child = %v (output %q), want SIGKILL at the point", err, out)
	}
}
