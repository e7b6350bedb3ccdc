package main

import (
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
)

// ownerFS is what rootOnlyWritable reads of the file system: a file's owner, group and mode
// without following a final symlink, and a symlink's target. osOwnerFS is the real one.
type ownerFS interface {
	Lstat(path string) (owner, error)
	Readlink(path string) (string, error)
}

// owner is the part of a file's metadata that decides who can replace it.
type owner struct {
	UID, GID uint32
	Mode     fs.FileMode
}

// rootOnlyWritable reports, as an error, the first reason why someone other than root could
// replace the file at path (absolute): the file, or any directory on the way to it, or any symlink
// target, owned by a non-root account or writable by a group other than root's or by others.
// A symlink's own mode means nothing on Linux and macOS; its directory's does, and its target is
// checked the same way.
func rootOnlyWritable(fsys ownerFS, path string) error {
	if !filepath.IsAbs(path) {
		return fmt.Errorf("%s: not an absolute path", path)
	}
	const maxLinks = 40
	links := 0
	// rest holds the components still to walk; done is the resolved prefix so far.
	done, rest := "/", splitPath(path)
	if err := checkOwner(fsys, "/"); err != nil {
		return err
	}
	for len(rest) > 0 {
		next := filepath.Join(done, rest[0])
		rest = rest[1:]
		o, err := fsys.Lstat(next)
		if err != nil {
			return err
		}
		if o.Mode&fs.ModeSymlink != 0 {
			if links++; links > maxLinks {
				return fmt.Errorf("%s: too many symlinks", path)
			}
			target, err := fsys.Readlink(next)
			if err != nil {
				return err
			}
			if filepath.IsAbs(target) {
				done = "/"
			}
			rest = append(splitPath(target), rest...)
			continue
		}
		if err := ownerOK(next, o); err != nil {
			return err
		}
		done = next
	}
	return nil
}

func splitPath(p string) []string {
	var out []string
	for _, e := range strings.Split(filepath.ToSlash(p), "/") {
		if e != "" && e != "." {
			out = append(out, e)
		}
	}
	return out
}

func checkOwner(fsys ownerFS, p string) error {
	o, err := fsys.Lstat(p)
	if err != nil {
		return err
	}
	return ownerOK(p, o)
}

// ownerOK: owned by root, and writable by no group but root's and not by others. (A ".."
// component is walked as written, after the directory it leaves was checked, which is stricter
// than needed, never looser.)
func ownerOK(p string, o owner) error {
	switch {
	case o.UID != 0:
		return fmt.Errorf("%s is owned by uid %d, not root", p, o.UID)
	case o.Mode.Perm()&0o002 != 0:
		return fmt.Errorf("%s is writable by every user (mode %v)", p, o.Mode.Perm())
	case o.Mode.Perm()&0o020 != 0 && o.GID != 0:
		return fmt.Errorf("%s is writable by group %d (mode %v)", p, o.GID, o.Mode.Perm())
	}
	return nil
}
