package query

import (
	"database/sql"
	"database/sql/driver"
	"errors"
	"io"
	"net"
	"strings"

	"github.com/lib/pq"
)

// Unreachable reports whether err is the database out of reach or going
// away (a restart, a failover, a network fault, no connection left),
// rather than a fault of the request or of Astro: a 503, which a client
// retries, and not a 500, which it does not.
func Unreachable(err error) bool {
	if errors.Is(err, driver.ErrBadConn) || errors.Is(err, sql.ErrConnDone) || errors.Is(err, io.ErrUnexpectedEOF) {
		return true
	}
	var pqErr *pq.Error
	if errors.As(err, &pqErr) {
		code := string(pqErr.Code)
		// 08: connection exception; 57P: the server shutting down or
		// starting; 53300: too many connections.
		return strings.HasPrefix(code, "08") || strings.HasPrefix(code, "57P") || code == "53300"
	}
	var netErr net.Error
	return errors.As(err, &netErr)
}
