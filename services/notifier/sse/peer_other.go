//go:build !unix

package sse

import "net"

// peerClosed cannot peek here; a dead client is noticed when a write fails.
func peerClosed(net.Conn) bool { return false }
