//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package httpapi

import "net"

// peerGone cannot tell here: a stream learns that its client left when a write fails.
func peerGone(net.Conn) bool { return false }
