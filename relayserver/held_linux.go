package relayserver

import (
	"crypto/tls"
	"errors"
	"net"
	"syscall"

	"github.com/agentmbx/agentmbx/internal/logkey"
)

// connWatch is one epoll instance watching every held connection for its client going away (or
// sending anything, which a host waiting for its answer does not): a held connection's file is
// also in the Go runtime's own poller, which is not asked about it while nobody reads. The
// event's data is the poll's token, so a late event of a connection no longer held is ignored.
// A pipe's read end (token 0) wakes the loop to stop.
type connWatch struct {
	epfd       int
	stopR      int
	stopW      int
	loopExited chan struct{}
}

func newConnWatch() (connWatch, error) {
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return connWatch{}, err
	}
	var p [2]int
	if err := syscall.Pipe2(p[:], syscall.O_CLOEXEC|syscall.O_NONBLOCK); err != nil {
		_ = syscall.Close(epfd)
		return connWatch{}, err
	}
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN}
	if err := syscall.EpollCtl(epfd, syscall.EPOLL_CTL_ADD, p[0], &ev); err != nil {
		_ = syscall.Close(epfd)
		_ = syscall.Close(p[0])
		_ = syscall.Close(p[1])
		return connWatch{}, err
	}
	return connWatch{epfd: epfd, stopR: p[0], stopW: p[1], loopExited: make(chan struct{})}, nil
}

// rawConn is the socket under c.
func rawConn(c net.Conn) (syscall.RawConn, error) {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil, errors.New("relayserver: a held connection without a socket")
	}
	return sc.SyscallConn()
}

// add watches c under token (not 0).
func (w connWatch) add(c net.Conn, token uint64) error {
	rc, err := rawConn(c)
	if err != nil {
		return err
	}
	var cerr error
	err = rc.Control(func(fd uintptr) {
		ev := syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLRDHUP | syscall.EPOLLONESHOT,
			Fd: int32(uint32(token)), Pad: int32(uint32(token >> 32))}
		cerr = syscall.EpollCtl(w.epfd, syscall.EPOLL_CTL_ADD, int(fd), &ev)
	})
	if err != nil {
		return err
	}
	return cerr
}

// del stops watching c.
func (w connWatch) del(c net.Conn) {
	if rc, err := rawConn(c); err == nil {
		_ = rc.Control(func(fd uintptr) { _ = syscall.EpollCtl(w.epfd, syscall.EPOLL_CTL_DEL, int(fd), nil) })
	}
}

// close stops the loop and releases the instance.
func (w connWatch) close() {
	_, _ = syscall.Write(w.stopW, []byte{0})
	<-w.loopExited
	_ = syscall.Close(w.epfd)
	_ = syscall.Close(w.stopR)
	_ = syscall.Close(w.stopW)
}

// runWatch reports the held connections whose client went away, until the watcher closes. It
// blocks one OS thread in epoll_wait.
func (hs *heldSet) runWatch() {
	w := hs.watch
	defer close(w.loopExited)
	evs := make([]syscall.EpollEvent, 128)
	for {
		n, err := syscall.EpollWait(w.epfd, evs, -1)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			hs.s.log.Error("long poll: connection watcher failed", logkey.Err, err)
			return
		}
		for _, ev := range evs[:n] {
			token := uint64(uint32(ev.Fd)) | uint64(uint32(ev.Pad))<<32
			if token == 0 {
				return
			}
			hs.gone(token)
		}
	}
}
