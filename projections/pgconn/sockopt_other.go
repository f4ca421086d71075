//go:build !linux

package pgconn

import "syscall"

// setUserTimeout does nothing where TCP_USER_TIMEOUT is not to be had: the
// keepalives and the contexts still bound a silent database.
func setUserTimeout(string, string, syscall.RawConn) error { return nil }
