//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package httpapi

import (
	"errors"
	"net"
	"syscall"
)

// peerGone reports whether the client at the other end of conn has closed or reset its side,
// without reading anything: a peek (MSG_PEEK, non-blocking) that finds the end of the stream.
// A server-sent events stream learns nothing else from its client, and a write into a closed
// connection succeeds once before it fails. False when it cannot tell (not a socket).
func peerGone(conn net.Conn) bool {
	for {
		u, ok := conn.(interface{ NetConn() net.Conn }) // TLS: the socket underneath
		if !ok {
			break
		}
		conn = u.NetConn()
	}
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	gone := false
	var b [1]byte
	// fasthttp does not read the connection while it writes the stream's answer, so the peek
	// never waits for the connection's read lock; returning true never waits for readiness.
	_ = rc.Read(func(fd uintptr) bool {
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		gone = (n == 0 && err == nil) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ENOTCONN)
		return true
	})
	return gone
}
