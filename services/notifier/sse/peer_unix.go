//go:build unix

package sse

import (
	"errors"
	"net"
	"syscall"
)

// peerClosed reports whether the client closed (or reset) conn, without
// blocking and without consuming anything: a peek at the socket. A hijacked
// stream has no reader goroutine (that would cost a stack per stream), so it
// looks at each heartbeat.
func peerClosed(conn net.Conn) bool {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	closed := false
	_ = rc.Read(func(fd uintptr) bool {
		var b [1]byte
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		switch {
		case err == nil:
			closed = n == 0 // an orderly shutdown reads as 0 bytes
		case errors.Is(err, syscall.EAGAIN), errors.Is(err, syscall.EINTR):
		default:
			closed = true
		}
		return true // never wait for readability
	})
	return closed
}
