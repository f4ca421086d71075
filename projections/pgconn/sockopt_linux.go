package pgconn

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// setUserTimeout makes the kernel drop a TCP connection whose sent data
// stays unacknowledged for userTimeout, instead of retransmitting for
// about fifteen minutes.
func setUserTimeout(network, _ string, rc syscall.RawConn) error {
	if network != "tcp" && network != "tcp4" && network != "tcp6" {
		return nil
	}
	var serr error
	err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, int(userTimeout.Milliseconds()))
	})
	if err != nil {
		return err
	}
	return serr
}
