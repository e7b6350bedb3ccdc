package failpoint

import (
	"errors"
	"testing"
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
