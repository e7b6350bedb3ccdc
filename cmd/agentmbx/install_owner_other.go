//go:build !unix

package main

import "errors"

// osOwnerFS cannot read owners here: a root service's binary is never taken as safe.
type osOwnerFS struct{}

func (osOwnerFS) Lstat(path string) (owner, error) {
	return owner{}, errors.New("file owners are not known on this system")
}

func (osOwnerFS) Readlink(path string) (string, error) {
	return "", errors.New("file owners are not known on this system")
}
