// Package pgconn owns how Astro connects to PostgreSQL: lib/pq, with every
// call on a connection bounded by the call's context.
//
// lib/pq answers a context that ends by sending a CancelRequest on a new
// connection, and goes on waiting for the original socket's answer. A
// database that goes silent without closing its connections (a frozen
// host, a stopped postmaster, a network partition) then holds every call,
// whatever its deadline, until TCP gives up, hours later. Here each
// connection's socket is captured as lib/pq dials it, and while a call is
// in flight the end of its context, once lib/pq's CancelRequest has had
// cancelGrace to end the call, sets the socket's deadline to the past: the
// blocked read or write fails then. A live server ends the call in
// milliseconds and a prepared statement's connection, which lib/pq keeps
// after a cancel, stays in the pool. A query's rows are read after
// QueryContext returns, so its watch lasts until the rows are closed; a
// transaction's Commit and Rollback take no context, so its watch is the
// BeginTx context's until the transaction ends. A connection whose
// deadline fired is in an unknown state of the protocol: it reports itself
// invalid, and the pool closes it.
//
// Sockets also send TCP keepalives and, on Linux, give up on data left
// unacknowledged for a minute (TCP_USER_TIMEOUT), so that behind a
// partition even a call without a deadline, or an idle connection, fails
// within about a minute. A stopped server whose kernel still answers is
// only ended by a context.
package pgconn

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"reflect"
	"sync"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"
)

const (
	keepAliveIdle     = 30 * time.Second
	keepAliveInterval = 10 * time.Second
	keepAliveCount    = 3
	// userTimeout bounds how long sent data may go unacknowledged, as the
	// keepalives bound an idle connection: about a minute either way.
	userTimeout = time.Minute
	// cancelTimeout bounds a CancelRequest, which a server that answers at
	// all answers in milliseconds. lib/pq waits for it before a prepared
	// statement's call returns.
	cancelTimeout = time.Second
	// cancelGrace is how long a call whose context ended has to end by
	// lib/pq's CancelRequest before its socket is failed.
	cancelGrace = time.Second
	// idleInTransaction bounds how long a session may sit in a
	// transaction without a call: as long as a projector's lock session
	// may go silent before another instance takes over (runner.go's
	// lockIdle). Between their calls Astro's transactions wait at most
	// for the log (a park, a redrive's next events), which answers in
	// milliseconds; one it keeps waiting longer is rolled back and retried.
	idleInTransaction = "15s"
)

// past is a deadline that has always passed.
var past = time.Unix(1, 0)

// Open returns a pool on dsn (a lib/pq URL or key=value string) whose calls
// end with their contexts; sqlx binds its queries as for "postgres".
func Open(dsn string) (*sqlx.DB, error) {
	c, err := NewConnector(dsn)
	if err != nil {
		return nil, err
	}
	return sqlx.NewDb(sql.OpenDB(c), "postgres"), nil
}

// NewConnector returns lib/pq's connector for dsn with every connection's
// calls bounded by their contexts; for sql.OpenDB.
func NewConnector(dsn string) (driver.Connector, error) {
	c, err := pq.NewConnector(dsn)
	if err != nil {
		return nil, err
	}
	c.Dialer(dialer{})
	return &connector{pq: c}, nil
}

type connector struct {
	pq *pq.Connector
}

// dialedKey carries the *conn that the socket dialled under a context
// belongs to: lib/pq also dials for its CancelRequests, and those sockets
// belong to no connection.
type dialedKey struct{}

func (c *connector) Connect(ctx context.Context) (driver.Conn, error) {
	cn := &conn{}
	// lib/pq uses the context only to dial: the startup and authentication
	// that follow would wait on a silent server for ever.
	w := cn.watch(ctx)
	pc, err := c.pq.Connect(context.WithValue(ctx, dialedKey{}, cn))
	if err = w.end(err); err != nil {
		return nil, err
	}
	cn.mu.Lock()
	broken, nc := cn.broken, cn.nc
	cn.mu.Unlock()
	if broken || nc == nil {
		_ = pc.Close()
		if nc == nil {
			return nil, errors.New("pgconn: lib/pq connected without pgconn's dialer")
		}
		return nil, fmt.Errorf("pgconn: connect: %w", context.Cause(ctx))
	}
	cn.pq = pc
	// A transaction whose client went silent (a partition) would hold its
	// row locks until the server's TCP gives up on the socket, hours
	// later: a projector's standby that took over would wait behind them.
	// The server ends such a session once it has been idle in a
	// transaction this long. A server that does not know the setting
	// (before 9.6) keeps its sessions as they were.
	if _, err := cn.ExecContext(ctx, `SET idle_in_transaction_session_timeout = '`+idleInTransaction+`'`, nil); err != nil && cn.isBroken() {
		_ = pc.Close()
		return nil, err
	}
	return cn, nil
}

func (c *connector) Driver() driver.Driver { return c.pq.Driver() }

// dialer is lib/pq's Dialer: it dials with keepalives and hands the socket
// to the connection being opened.
type dialer struct{}

func (d dialer) Dial(network, address string) (net.Conn, error) {
	return d.DialContext(context.Background(), network, address)
}

func (d dialer) DialTimeout(network, address string, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return d.DialContext(ctx, network, address)
}

func (dialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	nd := net.Dialer{
		KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: keepAliveIdle, Interval: keepAliveInterval, Count: keepAliveCount},
		Control:         setUserTimeout,
	}
	cn, ok := ctx.Value(dialedKey{}).(*conn)
	if !ok {
		// A CancelRequest, which lib/pq makes after the call's context
		// ended, and reads until the server closes it: a silent server
		// never does.
		deadline := time.Now().Add(cancelTimeout)
		ctx, cancel := context.WithDeadline(ctx, deadline)
		defer cancel()
		nc, err := nd.DialContext(ctx, network, address)
		if err != nil {
			return nil, err
		}
		_ = nc.SetDeadline(deadline)
		return nc, nil
	}
	nc, err := nd.DialContext(ctx, network, address)
	if err != nil {
		return nil, err
	}
	cn.mu.Lock()
	defer cn.mu.Unlock()
	// Another host, or another SSL mode, after a failed attempt: the last
	// socket is the one lib/pq keeps.
	cn.nc = nc
	if cn.broken {
		_ = nc.SetDeadline(past)
	}
	return nc, nil
}

// conn is a lib/pq connection whose calls end with their contexts.
type conn struct {
	pq driver.Conn

	mu     sync.Mutex
	nc     net.Conn // the socket under pq
	broken bool     // a watch fired: the socket's deadline has passed
}

// watch is one call's (or one transaction's, or one query's rows') hold on
// its connection's socket until end: while it lasts, the end of ctx fails
// the socket.
type watch struct {
	cn   *conn
	ctx  context.Context
	stop func() bool
	// Under cn.mu:
	ended bool
	fired bool
}

func (cn *conn) watch(ctx context.Context) *watch {
	w := &watch{cn: cn, ctx: ctx}
	// fire does nothing once the call has ended: the timer need not stop.
	w.stop = context.AfterFunc(ctx, func() { time.AfterFunc(cancelGrace, w.fire) })
	return w
}

func (w *watch) fire() {
	w.cn.mu.Lock()
	defer w.cn.mu.Unlock()
	if w.ended {
		return
	}
	w.fired = true
	w.cn.broken = true
	if w.cn.nc != nil {
		_ = w.cn.nc.SetDeadline(past)
	}
}

// explain returns err, saying that the context's end caused it if the watch
// fired: the socket's timeout alone would hide why.
func (w *watch) explain(err error) error {
	w.cn.mu.Lock()
	fired := w.fired
	w.cn.mu.Unlock()
	if !fired || err == nil || errors.Is(err, io.EOF) {
		return err
	}
	return fmt.Errorf("%w: %w", context.Cause(w.ctx), err)
}

// end ends the watch and returns err as explain does.
func (w *watch) end(err error) error {
	w.stop()
	w.cn.mu.Lock()
	w.ended = true
	w.cn.mu.Unlock()
	return w.explain(err)
}

func (cn *conn) isBroken() bool {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	return cn.broken
}

func (cn *conn) Prepare(query string) (driver.Stmt, error) {
	return cn.PrepareContext(context.Background(), query)
}

func (cn *conn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	w := cn.watch(ctx)
	s, err := cn.pq.(driver.ConnPrepareContext).PrepareContext(ctx, query)
	if err = w.end(err); err != nil {
		return nil, err
	}
	return &stmt{Stmt: s, cn: cn}, nil
}

func (cn *conn) Close() error { return cn.pq.Close() }

func (cn *conn) Begin() (driver.Tx, error) {
	return cn.BeginTx(context.Background(), driver.TxOptions{})
}

func (cn *conn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	w := cn.watch(ctx)
	t, err := cn.pq.(driver.ConnBeginTx).BeginTx(ctx, opts)
	if err != nil {
		return nil, w.end(err)
	}
	return &tx{Tx: t, w: w}, nil
}

func (cn *conn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	w := cn.watch(ctx)
	r, err := cn.pq.(driver.QueryerContext).QueryContext(ctx, query, args)
	if err != nil {
		return nil, w.end(err)
	}
	return &rows{Rows: r, w: w}, nil
}

func (cn *conn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	w := cn.watch(ctx)
	res, err := cn.pq.(driver.ExecerContext).ExecContext(ctx, query, args)
	return res, w.end(err)
}

func (cn *conn) Ping(ctx context.Context) error {
	w := cn.watch(ctx)
	return w.end(cn.pq.(driver.Pinger).Ping(ctx))
}

func (cn *conn) CheckNamedValue(nv *driver.NamedValue) error {
	return cn.pq.(driver.NamedValueChecker).CheckNamedValue(nv)
}

func (cn *conn) ResetSession(ctx context.Context) error {
	if cn.isBroken() {
		return driver.ErrBadConn
	}
	return cn.pq.(driver.SessionResetter).ResetSession(ctx)
}

func (cn *conn) IsValid() bool {
	return !cn.isBroken() && cn.pq.(driver.Validator).IsValid()
}

// tx keeps its BeginTx context's watch until it ends.
type tx struct {
	driver.Tx
	w *watch
}

func (t *tx) Commit() error   { return t.w.end(t.Tx.Commit()) }
func (t *tx) Rollback() error { return t.w.end(t.Tx.Rollback()) }

// stmt is a statement prepared on cn; its calls are watched as cn's are.
type stmt struct {
	driver.Stmt
	cn *conn
}

func (s *stmt) Close() error {
	if s.cn.isBroken() {
		return driver.ErrBadConn // closing it on the server would wait on a dead socket
	}
	return s.Stmt.Close()
}

func (s *stmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	w := s.cn.watch(ctx)
	var res driver.Result
	var err error
	if sc, ok := s.Stmt.(driver.StmtExecContext); ok {
		res, err = sc.ExecContext(ctx, args)
	} else if vs, verr := values(args); verr != nil { // lib/pq's COPY FROM STDIN has no context methods
		err = verr
	} else {
		res, err = s.Stmt.Exec(vs) //nolint:staticcheck // the statement has no ExecContext
	}
	return res, w.end(err)
}

func (s *stmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	w := s.cn.watch(ctx)
	var r driver.Rows
	var err error
	if sc, ok := s.Stmt.(driver.StmtQueryContext); ok {
		r, err = sc.QueryContext(ctx, args)
	} else if vs, verr := values(args); verr != nil {
		err = verr
	} else {
		r, err = s.Stmt.Query(vs) //nolint:staticcheck // the statement has no QueryContext
	}
	if err != nil {
		return nil, w.end(err)
	}
	return &rows{Rows: r, w: w}, nil
}

// values is args for a statement without the context methods, as
// database/sql passes them: positional only.
func values(args []driver.NamedValue) ([]driver.Value, error) {
	vs := make([]driver.Value, len(args))
	for i, a := range args {
		if a.Name != "" {
			return nil, errors.New("pgconn: the statement takes no named arguments")
		}
		vs[i] = a.Value
	}
	return vs, nil
}

// rows keeps its query's watch until closed: they are read from the socket
// as Next is called.
type rows struct {
	driver.Rows
	w *watch
}

func (r *rows) Next(dest []driver.Value) error { return r.w.explain(r.Rows.Next(dest)) }
func (r *rows) Close() error                   { return r.w.end(r.Rows.Close()) }

// What lib/pq's rows tell of their columns and result sets, passed on; the
// defaults are database/sql's for a driver without them.

func (r *rows) HasNextResultSet() bool {
	n, ok := r.Rows.(driver.RowsNextResultSet)
	return ok && n.HasNextResultSet()
}

func (r *rows) NextResultSet() error {
	n, ok := r.Rows.(driver.RowsNextResultSet)
	if !ok {
		return io.EOF
	}
	return r.w.explain(n.NextResultSet())
}

func (r *rows) ColumnTypeScanType(i int) reflect.Type {
	if c, ok := r.Rows.(driver.RowsColumnTypeScanType); ok {
		return c.ColumnTypeScanType(i)
	}
	return reflect.TypeFor[any]()
}

func (r *rows) ColumnTypeDatabaseTypeName(i int) string {
	if c, ok := r.Rows.(driver.RowsColumnTypeDatabaseTypeName); ok {
		return c.ColumnTypeDatabaseTypeName(i)
	}
	return ""
}

func (r *rows) ColumnTypeLength(i int) (int64, bool) {
	if c, ok := r.Rows.(driver.RowsColumnTypeLength); ok {
		return c.ColumnTypeLength(i)
	}
	return 0, false
}

func (r *rows) ColumnTypePrecisionScale(i int) (int64, int64, bool) {
	if c, ok := r.Rows.(driver.RowsColumnTypePrecisionScale); ok {
		return c.ColumnTypePrecisionScale(i)
	}
	return 0, 0, false
}
