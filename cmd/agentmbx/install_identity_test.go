package main

import (
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"testing"
)

// fakeOwnerFS is a file tree of owners and modes, with symlinks, for rootOnlyWritable.
type fakeOwnerFS struct {
	files map[string]owner
	links map[string]string
}

func (f fakeOwnerFS) Lstat(p string) (owner, error) {
	if _, ok := f.links[p]; ok {
		return owner{Mode: fs.ModeSymlink | 0o777, UID: 1000}, nil
	}
	o, ok := f.files[p]
	if !ok {
		return owner{}, fmt.Errorf("%s: %w", p, fs.ErrNotExist)
	}
	return o, nil
}

func (f fakeOwnerFS) Readlink(p string) (string, error) {
	t, ok := f.links[p]
	if !ok {
		return "", fmt.Errorf("%s: not a link", p)
	}
	return t, nil
}

var (
	rootUser  = &user.User{Uid: "0", Gid: "0", Username: "root", HomeDir: "/root"}
	aliceUser = &user.User{Uid: "1000", Gid: "1000", Username: "alice", HomeDir: "/home/alice"}
)

// fakeTree: a root-owned /usr/local/bin/agentmbx, a user's ~/go/bin/agentmbx, a root-owned
// binary in a world-writable directory and in a group-writable one, and symlinks to each kind.
func fakeTree() fakeOwnerFS {
	dir := func(uid, gid uint32, perm fs.FileMode) owner {
		return owner{UID: uid, GID: gid, Mode: fs.ModeDir | perm}
	}
	file := func(uid, gid uint32, perm fs.FileMode) owner { return owner{UID: uid, GID: gid, Mode: perm} }
	return fakeOwnerFS{files: map[string]owner{
		"/":                           dir(0, 0, 0o755),
		"/usr":                        dir(0, 0, 0o755),
		"/usr/local":                  dir(0, 0, 0o755),
		"/usr/local/bin":              dir(0, 0, 0o775), // group-writable by root's group: fine
		"/usr/local/bin/agentmbx":     file(0, 0, 0o755),
		"/home":                       dir(0, 0, 0o755),
		"/home/alice":                 dir(1000, 1000, 0o755),
		"/home/alice/go":              dir(1000, 1000, 0o755),
		"/home/alice/go/bin":          dir(1000, 1000, 0o755),
		"/home/alice/go/bin/agentmbx": file(1000, 1000, 0o755),
		"/opt":                        dir(0, 0, 0o755),
		"/opt/open":                   dir(0, 0, 0o1777),
		"/opt/open/agentmbx":          file(0, 0, 0o755),
		"/opt/staff":                  dir(0, 50, 0o775),
		"/opt/staff/agentmbx":         file(0, 0, 0o755),
		"/opt/mine":                   dir(0, 0, 0o755),
		"/opt/mine/agentmbx":          file(1000, 0, 0o755),
		"/opt/gw":                     dir(0, 0, 0o755),
		"/opt/gw/agentmbx":            file(0, 50, 0o775),
	}, links: map[string]string{
		"/usr/bin":              "local/bin", // relative, to a safe place
		"/opt/link-to-home":     "/home/alice/go/bin/agentmbx",
		"/opt/link-to-safe":     "../usr/local/bin/agentmbx",
		"/usr/local/bin/linked": "/opt/link-to-home",
	}}
}

func TestRootOnlyWritable(t *testing.T) {
	fsys := fakeTree()
	for _, tc := range []struct {
		path, wantErr string // wantErr "": accepted
	}{
		{"/usr/local/bin/agentmbx", ""},
		{"/usr/bin/agentmbx", ""},
		{"/opt/link-to-safe", ""},
		{"/home/alice/go/bin/agentmbx", "/home/alice is owned by uid 1000"},
		{"/opt/open/agentmbx", "/opt/open is writable by every user"},
		{"/opt/staff/agentmbx", "/opt/staff is writable by group 50"},
		{"/opt/mine/agentmbx", "/opt/mine/agentmbx is owned by uid 1000"},
		{"/opt/gw/agentmbx", "/opt/gw/agentmbx is writable by group 50"},
		{"/opt/link-to-home", "/home/alice is owned by uid 1000"},
		{"/usr/local/bin/linked", "/home/alice is owned by uid 1000"},
		{"/usr/local/bin/missing", "not exist"},
		{"relative/agentmbx", "not an absolute path"},
	} {
		err := rootOnlyWritable(fsys, tc.path)
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%s: refused: %v", tc.path, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%s: got %v, want an error with %q", tc.path, err, tc.wantErr)
		}
	}
	loop := fakeOwnerFS{files: map[string]owner{"/": {Mode: fs.ModeDir | 0o755}}, links: map[string]string{"/a": "/b", "/b": "/a"}}
	if err := rootOnlyWritable(loop, "/a"); err == nil || !strings.Contains(err.Error(), "too many symlinks") {
		t.Errorf("symlink loop: %v", err)
	}
}

// withIdentity makes `daemon install` see id for the rest of the test.
func withIdentity(t *testing.T, id identity) {
	t.Helper()
	if id.FS == nil {
		id.FS = fakeTree()
	}
	if id.Lookup == nil {
		id.Lookup = func(name string) (*user.User, error) {
			for _, u := range []*user.User{rootUser, aliceUser} {
				if u.Username == name {
					return u, nil
				}
			}
			return nil, user.UnknownUserError(name)
		}
	}
	if id.Getenv == nil {
		id.Getenv = func(string) string { return "" }
	}
	saved := installIdentity
	installIdentity = func() (identity, error) { return id, nil }
	t.Cleanup(func() { installIdentity = saved })
}

// TestInstallUnderSudoRunsAsSudoUser: `sudo agentmbx daemon install` writes a system unit that
// runs the daemon as the user who ran sudo, with that user's default home, never as root.
func TestInstallUnderSudoRunsAsSudoUser(t *testing.T) {
	withIdentity(t, identity{EUID: 0, Current: rootUser, SudoUser: "alice"})
	for _, goos := range []string{"linux", "darwin"} {
		out, err := runMain(t, "daemon", "install", "--os", goos, "--dry-run", "--bin", "/home/alice/go/bin/agentmbx")
		if err != nil {
			t.Fatalf("%s: %v\n%s", goos, err, out)
		}
		want := map[string][]string{
			"linux": {"the service runs as alice\n", "\nUser=alice\n", "would write /etc/systemd/system/agentmbx.service:",
				"ExecStart=/home/alice/go/bin/agentmbx daemon --home /home/alice/.local/share/agentmbx ",
				"ReadWritePaths=/home/alice/.local/share/agentmbx\n"},
			"darwin": {"the service runs as alice\n", "<key>UserName</key>\n\t<string>alice</string>",
				"would write /Library/LaunchDaemons/com.agentmbx.daemon.plist:", "<string>/home/alice/.local/share/agentmbx</string>"},
		}[goos]
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Errorf("%s: dry run lacks %q:\n%s", goos, w, out)
			}
		}
		if strings.Contains(out, "User=root") || strings.Contains(out, "<string>root</string>") {
			t.Errorf("%s: runs as root:\n%s", goos, out)
		}
	}
}

// TestInstallAsRootNeedsConsent: as root without sudo, and --user under sudo, install refuses
// rather than guess; --run-as root is accepted only for a binary only root can replace.
func TestInstallAsRootNeedsConsent(t *testing.T) {
	withIdentity(t, identity{EUID: 0, Current: rootUser})
	if out, err := runMain(t, "daemon", "install", "--os", "linux", "--dry-run", "--bin", "/usr/local/bin/agentmbx"); err == nil ||
		!strings.Contains(out, "--run-as") || strings.Contains(out, "would write") {
		t.Fatalf("root without sudo or --run-as: %v\n%s", err, out)
	}
	out, err := runMain(t, "daemon", "install", "--os", "linux", "--dry-run", "--run-as", "root", "--bin", "/usr/local/bin/agentmbx", "--home", "/var/lib/agentmbx")
	if err != nil || !strings.Contains(out, "\nUser=root\n") || !strings.Contains(out, "the service runs as root") {
		t.Fatalf("--run-as root with a root-owned binary: %v\n%s", err, out)
	}
	for _, bin := range []string{"/home/alice/go/bin/agentmbx", "/opt/open/agentmbx", "/opt/link-to-home"} {
		out, err := runMain(t, "daemon", "install", "--os", "linux", "--dry-run", "--run-as", "root", "--bin", bin, "--home", "/var/lib/agentmbx")
		if err == nil || !strings.Contains(out, "only root can replace") || !strings.Contains(out, "install -o root") || strings.Contains(out, "would write") {
			t.Errorf("--run-as root with %s: %v\n%s", bin, err, out)
		}
	}
	dir := t.TempDir()
	if out, err := runMain(t, "daemon", "install", "--os", "linux", "--dir", dir, "--run-as", "root", "--bin", "/opt/open/agentmbx", "--home", "/var/lib/agentmbx"); err == nil {
		t.Fatalf("--dir with an unsafe binary wrote: %s", out)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("refused install left %v", entries)
	}

	withIdentity(t, identity{EUID: 0, Current: rootUser, SudoUser: "alice"})
	if out, err := runMain(t, "daemon", "install", "--user", "--os", "linux", "--dry-run", "--bin", "/usr/local/bin/agentmbx"); err == nil || !strings.Contains(out, "without sudo") {
		t.Fatalf("--user under sudo: %v\n%s", err, out)
	}
	if out, err := runMain(t, "daemon", "install", "--user", "--run-as", "alice", "--os", "linux", "--dry-run"); err == nil {
		t.Fatalf("--user --run-as: %s", out)
	}
	if out, err := runMain(t, "daemon", "install", "--run-as", "mallory", "--os", "linux", "--dry-run"); err == nil || !strings.Contains(out, "mallory") {
		t.Fatalf("--run-as an unknown account: %v\n%s", err, out)
	}
}

// TestInstallRootRefusesWritableBinaryOnDisk runs the owner check on the real file system: a
// binary in a directory every user can write is refused, whoever runs the test.
func TestInstallRootRefusesWritableBinaryOnDisk(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "open")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil { // world-writable on purpose, whatever the umask
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "agentmbx")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	err := rootOnlyWritable(osOwnerFS{}, bin)
	if err == nil || !strings.Contains(err.Error(), "writable by every user") && !strings.Contains(err.Error(), "not root") {
		t.Fatalf("binary in a world-writable directory: %v", err)
	}
	if os.Geteuid() == 0 {
		if err := rootOnlyWritable(osOwnerFS{}, "/"); err != nil {
			t.Logf("note: / itself is not root-only here: %v", err)
		}
	}
}
