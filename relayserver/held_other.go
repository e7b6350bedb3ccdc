//go:build !linux

package relayserver

import (
	"errors"
	"net"
)

// connWatch is not built here: without it, long polls park the standard way.
type connWatch struct{}

func newConnWatch() (connWatch, error) {
	return connWatch{}, errors.New("relayserver: held long polls are built for Linux only")
}

func (connWatch) add(net.Conn, uint64) error { return errors.New("relayserver: no connection watcher") }
func (connWatch) del(net.Conn)               {}
func (connWatch) close()                     {}
func (hs *heldSet) runWatch()                {}
