package relayserver_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentmbx/agentmbx/relayserver"
)

func TestLoadKey(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	none := func(string) string { return "" }
	k1, src, err := relayserver.LoadKey(dir, none, seeded(1))
	if err != nil || src != relayserver.KeyGenerated {
		t.Fatalf("first LoadKey = %v, %v; want a generated key", src, err)
	}
	fi, err := os.Stat(filepath.Join(dir, relayserver.KeyFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("relay.key = %v, %v; want mode 0600", fi, err)
	}
	k2, src, err := relayserver.LoadKey(dir, none, seeded(2))
	if err != nil || src != relayserver.KeyFromFile || k2.PublicKey() != k1.PublicKey() {
		t.Fatalf("second LoadKey = %v, %v; want the same key from the file", src, err)
	}
	k3 := keyFor(t, 7)
	env := func(n string) string {
		if n == relayserver.EnvRelayKey {
			return k3.Seed()
		}
		return ""
	}
	got, src, err := relayserver.LoadKey(dir, env, seeded(3))
	if err != nil || src != relayserver.KeyFromEnv || got.PublicKey() != k3.PublicKey() {
		t.Fatalf("LoadKey with %s = %v, %v; want the env key", relayserver.EnvRelayKey, src, err)
	}
	secret := "c2VjcmV0LXNlZWQtdG9vLXNob3J0"
	_, _, err = relayserver.LoadKey(dir, func(string) string { return secret }, seeded(4))
	if !errors.Is(err, relayserver.ErrBadKey) || strings.Contains(err.Error(), secret) {
		t.Fatalf("bad env key = %v; want ErrBadKey without the value", err)
	}
	if err := os.WriteFile(filepath.Join(dir, relayserver.KeyFile), []byte(`{"publicKey":"x","privateKey":"`+secret+`"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	_, _, err = relayserver.LoadKey(dir, none, seeded(5))
	if !errors.Is(err, relayserver.ErrBadKey) || strings.Contains(err.Error(), secret) {
		t.Fatalf("bad key file = %v; want ErrBadKey without the value", err)
	}
}
